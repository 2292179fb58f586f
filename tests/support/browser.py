"""Headless Chromium (Debian's `chromium`) driven over the DevTools protocol on a pipe: the tests
load pages as a reader's browser does and ask it what is on them, with the standard library only.

`--remote-debugging-pipe` makes Chromium read protocol commands from its fd 3 and write replies
and events to its fd 4, each a JSON object ended by a NUL byte: no port, no websocket, no
browser library."""

import base64
import contextlib
import fcntl
import json
import os
import select
import shutil
import subprocess
from pathlib import Path

# seconds without a word from the browser before a test gives up on it (a hang, not a timing)
SILENCE = 120


def chromium() -> str | None:
    """The chromium executable, or None where it is not installed."""
    return shutil.which("chromium")


def version(executable: str) -> str:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True).stdout
    return out.strip().splitlines()[0] if out.strip() else "unknown"


class Browser:
    """One headless Chromium with one tab of a fixed size."""

    def __init__(self, executable: str, profile: Path, width: int = 1280, height: int = 2000):
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        # the child's fds 3 and 4; the ends are first moved above 9 so the dup2s cannot clash
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 10) for fd in (commands_read, replies_write)]
        for fd in (commands_read, replies_write):
            os.close(fd)

        def wire():
            os.dup2(high[0], 3)
            os.dup2(high[1], 4)

        flags = [
            "--headless=new",
            "--no-sandbox",  # as root Chromium refuses to start with its sandbox
            "--disable-gpu",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--remote-debugging-pipe",
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
        ]
        self.process = subprocess.Popen(
            [executable, *flags, "about:blank"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=wire,
            pass_fds=(3, 4),
        )
        for fd in high:
            os.close(fd)
        self._buffer, self._next, self.events = b"", 0, []
        target = self._call("Target.createTarget", {"url": "about:blank"})["targetId"]
        attached = self._call("Target.attachToTarget", {"targetId": target, "flatten": True})
        self._session = attached["sessionId"]
        self.call("Page.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
        )

    def _message(self) -> dict:
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._replies], [], [], SILENCE)
            chunk = os.read(self._replies, 1 << 20) if ready else b""
            if not chunk:
                raise RuntimeError(f"chromium said nothing for {SILENCE} s or exited")
            self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def _call(self, method: str, params: dict | None = None, session: str | None = None) -> dict:
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            reply = self._message()
            if reply.get("id") == self._next:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]
            self.events.append(reply)

    def call(self, method: str, params: dict | None = None) -> dict:
        """A protocol command in the tab."""
        return self._call(method, params, self._session)

    def _wait_for(self, event: str) -> None:
        while True:
            for number, seen in enumerate(self.events):
                if seen.get("method") == event and seen.get("sessionId") == self._session:
                    del self.events[: number + 1]
                    return
            self.events.append(self._message())

    def open(self, url: str) -> None:
        """Load `url` and wait for its load event: every image has loaded or failed by then."""
        self.events.clear()
        navigated = self.call("Page.navigate", {"url": url})
        if navigated.get("errorText"):
            raise RuntimeError(f"{url}: {navigated['errorText']}")
        self._wait_for("Page.loadEventFired")

    def evaluate(self, expression: str):
        """The value of a JavaScript expression in the page."""
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def screenshot(self, path: Path) -> Path:
        """A PNG of what the window shows, from the top of the page."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(base64.b64decode(data))
        return Path(path)

    def close(self) -> None:
        with contextlib.suppress(RuntimeError, OSError):  # it may exit before it answers
            self._call("Browser.close")
        try:
            self.process.wait(timeout=SILENCE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._commands, self._replies):
            os.close(fd)
