"""Base images made here, for hosts that cannot pull from a registry (`inv build --base local`).

A Debian bookworm root filesystem from `debootstrap --variant=minbase` (ppc64el and arm64:
`--foreign` and the second stage under qemu-user-static), given this machine's apt sources
(debootstrap writes only `bookworm main`), then made an image (FROM scratch + ADD) for the right
platform. Cached: an image whose label holds the same recipe hash is reused, so the second build
skips all of this.

debootstrap takes minutes (more under emulation): its phases are echoed as they come, with the
time spent, and a heartbeat every 30 s. A mirror caught mid-sync (an index that does not match
its Release file: seen for bookworm-security ppc64el) fails a download; such failures are retried
and, if they persist, reported in one line naming the mirror.
"""

import hashlib
import json
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from queue import Empty, Queue

from suite.errors import SuiteError

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# what every suite image needs from Debian: Python (the same 3.11 on every architecture),
# venv, certificates, psutil (so the host description runs in the bare base, under emulation too)
INCLUDE = ("python3", "python3-venv", "python3-pip", "python3-psutil", "ca-certificates")
ARCHES = {  # suite name -> (Debian architecture, docker platform, qemu binary)
    "x86_64": ("amd64", "linux/amd64", None),
    "ppc64le": ("ppc64el", "linux/ppc64le", "qemu-ppc64le"),
    "aarch64": ("arm64", "linux/arm64", "qemu-aarch64"),
}
# what a failed download of a mirror that is being synced (or a flaky network) says: worth a retry
TRANSIENT = re.compile(
    r"Hash Sum mismatch|unexpected size|Mirror sync in progress|"
    r"Couldn't download|Failed getting release|Invalid Release|"
    r"Connection (timed out|refused|reset)|Temporary failure"
)
ATTEMPTS, RETRY_PAUSE_S, HEARTBEAT_S = 3, 20, 30
RECIPE_LABEL = "org.lms-suite.base-recipe"
HOST_SOURCES = Path("/etc/apt/sources.list.d/debian.sources")


def base_tag(arch: str) -> str:
    return f"lms-suite-base:{SUITE}-{ARCHES[arch][0]}"


def recipe_hash(arch: str) -> str:
    sources = HOST_SOURCES.read_text() if HOST_SOURCES.exists() else ""
    recipe = {
        "suite": SUITE,
        "arch": arch,
        "include": INCLUDE,
        "mirror": MIRROR,
        "sources": sources,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def _run(command: list[str], echo, what: str) -> None:
    echo(f"    $ {' '.join(command)}")
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-5:]
        raise SuiteError(f"{what} failed (exit {completed.returncode}): " + " | ".join(tail))


def _last_line(path: Path | None, pattern: str = r"^(Setting up|Unpacking|Selecting) ") -> str:
    """The newest line of debootstrap's own log matching `pattern` (what dpkg does now)."""
    try:
        text = path.read_text(errors="replace")[-20000:] if path else ""
    except OSError:
        return ""
    found = [line for line in text.splitlines() if re.match(pattern, line)]
    return found[-1][:80] if found else ""


def _pump(stream, queue: Queue) -> None:
    """Lines of `stream` into `queue`, then None: lets the caller wait with a timeout."""
    for line in stream:
        queue.put(line)
    queue.put(None)


def _run_talking(command: list[str], echo, what: str, log: Path | None = None) -> None:
    """Run a long command (debootstrap), echoing each new phase ("Retrieving", "Validating",
    "Extracting", "Configuring", ...) with the minutes so far, and every 30 s what it does now
    (from `log`, debootstrap's own log, when given); retry a transient mirror failure; one
    SuiteError line if it keeps failing."""
    for attempt in range(1, ATTEMPTS + 1):
        echo(f"    $ {' '.join(command)}" + (f"  (attempt {attempt}/{ATTEMPTS})" * (attempt > 1)))
        started = time.monotonic()
        lines, counts = [], {}
        process = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
        )
        queue = Queue()
        threading.Thread(target=_pump, args=(process.stdout, queue), daemon=True).start()
        while True:
            try:
                line = queue.get(timeout=HEARTBEAT_S)
            except Empty:  # quiet for a while: say what it is doing
                doing = _last_line(log) or ", ".join(f"{k} {v}" for k, v in counts.items())
                echo(f"      {(time.monotonic() - started) / 60:4.1f} min  {doing or '...'}")
                continue
            if line is None:
                break
            line = line.rstrip()
            lines.append(line)
            word = re.match(r"[IWE]: (\w+)", line)
            if word:  # debootstrap interleaves phases per package: new ones are news
                counts[word.group(1)] = counts.get(word.group(1), 0) + 1
                if counts[word.group(1)] == 1:
                    echo(f"      {(time.monotonic() - started) / 60:4.1f} min  {line[3:90]}")
        code = process.wait()
        if code == 0:
            echo(f"      done in {(time.monotonic() - started) / 60:.1f} min")
            return
        errors = [line for line in lines if line.startswith(("E:", "W:"))] or lines[-3:]
        transient = any(TRANSIENT.search(line) for line in lines[-40:])
        if not transient or attempt == ATTEMPTS:
            kind = "the mirror kept failing" if transient else f"exit {code}"
            raise SuiteError(f"{what} failed ({kind}, {MIRROR}): " + " | ".join(errors[-3:]))
        echo(f"      the mirror failed ({errors[-1][:100]}); again in {RETRY_PAUSE_S}s")
        time.sleep(RETRY_PAUSE_S)


def enable_emulation(arch: str, echo=print) -> None:
    """Register qemu-user-static for `arch` with binfmt_misc (needs root, as docker does)."""
    qemu = ARCHES[arch][2]
    if qemu is None:
        return
    if not shutil.which(f"{qemu}-static") and not Path(f"/usr/bin/{qemu}-static").exists():
        raise SuiteError(f"{qemu}-static is missing: apt-get install qemu-user-static")
    binfmt = Path("/proc/sys/fs/binfmt_misc")
    if not (binfmt / "register").exists():
        _run(["mount", "-t", "binfmt_misc", "binfmt_misc", str(binfmt)], echo, "mount binfmt_misc")
    if not (binfmt / qemu).exists():
        _run(["update-binfmts", "--enable", qemu], echo, f"update-binfmts --enable {qemu}")


def make_base_image(client, arch: str, echo=print, force: bool = False) -> str:
    """The local base image for `arch` (made if missing or its recipe changed); its tag."""
    if arch not in ARCHES:
        raise SuiteError(f"unknown architecture {arch!r}; choose one of {', '.join(ARCHES)}")
    tag, recipe = base_tag(arch), recipe_hash(arch)
    if not force:
        try:
            image = client.images.get(tag)
            if image.labels.get(RECIPE_LABEL) == recipe:
                echo(f"base {tag}: cached ({image.id[7:19]})")
                return tag
        except Exception:  # docker.errors.ImageNotFound: make it
            pass
    if not shutil.which("debootstrap"):
        raise SuiteError("debootstrap is missing: apt-get install debootstrap")
    debian_arch, platform, qemu = ARCHES[arch]
    enable_emulation(arch, echo)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lms-base-") as tmp:
        root = Path(tmp) / "rootfs"
        command = [
            "debootstrap",
            "--variant=minbase",
            f"--arch={debian_arch}",
            f"--include={','.join(INCLUDE)}",
        ]
        if qemu:
            command.append("--foreign")
        echo(f"base {tag}: debootstrap {SUITE} {debian_arch} (a few minutes under emulation)")
        log = root / "debootstrap" / "debootstrap.log"
        _run_talking([*command, SUITE, str(root), MIRROR], echo, "debootstrap", log)
        if qemu:
            shutil.copy(f"/usr/bin/{qemu}-static", root / "usr" / "bin")
            _run_talking(
                ["chroot", str(root), "/debootstrap/debootstrap", "--second-stage"],
                echo,
                "debootstrap --second-stage (under qemu)",
                log,
            )
            (root / "usr" / "bin" / f"{qemu}-static").unlink()
        if HOST_SOURCES.exists():  # the mirrors (and suites) this machine uses
            (root / "etc/apt/sources.list").unlink(missing_ok=True)
            shutil.copy(HOST_SOURCES, root / "etc/apt/sources.list.d/debian.sources")
        for cache in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (root / cache).glob("*"):
                if item.is_file():
                    item.unlink()
        context = Path(tmp) / "context"
        context.mkdir()
        tarball = context / "rootfs.tar"
        _run(["tar", "-C", str(root), "-cf", str(tarball), "."], echo, "tar rootfs")
        # FROM scratch + ADD, built for the target platform: unlike `docker import` (whose
        # --platform this daemon ignores), the image's metadata then names its architecture
        (context / "Dockerfile").write_text('FROM scratch\nADD rootfs.tar /\nCMD ["/bin/bash"]\n')
        size = tarball.stat().st_size / 2**20
        echo(f"base {tag}: image from the root filesystem ({size:.0f} MiB)")
        client.images.build(
            path=str(context),
            tag=tag,
            platform=platform,
            labels={RECIPE_LABEL: recipe},
            network_mode="none",  # FROM scratch + ADD: nothing to fetch
            pull=False,
            rm=True,
        )
    echo(f"base {tag}: made in {time.monotonic() - started:.0f}s")
    return tag
