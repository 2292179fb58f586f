"""Stopping a run: SIGINT and SIGTERM become one exception that unwinds the run, so that every
place that started something (a trial process, a container, a Slurm job) stops it on the way
out, and the user reads one line instead of a traceback.

Python turns SIGINT into KeyboardInterrupt but leaves SIGTERM (what `kill`, `timeout`, systemd and
Slurm send) fatal at once, with no `finally` run: a trial process in its own session would go on
training as an orphan. Inside `interruptible()` both raise `RunInterrupted` in the main thread.
SIGKILL cannot be caught: what a run starts must also notice on its own that the run is gone.
"""

import contextlib
import signal
import threading

from suite.errors import SuiteError

HANDLED = (signal.SIGINT, signal.SIGTERM)


class RunInterrupted(SuiteError):
    """The run was stopped by a signal; `signal_name` says which ("SIGINT", "SIGTERM")."""

    def __init__(self, signal_name: str, message: str | None = None):
        super().__init__(message or f"interrupted by {signal_name}")
        self.signal_name = signal_name

    @property
    def exit_code(self) -> int:
        """The shell's convention for a process ended by a signal: 128 + its number (130 for
        SIGINT, 143 for SIGTERM)."""
        return 128 + signal.Signals[self.signal_name].value

    def line(self) -> str:
        return f"stopped: {self}"


def _raise(signum, _frame):
    raise RunInterrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def interruptible():
    """SIGINT and SIGTERM raise `RunInterrupted` while inside (main thread only: elsewhere, and
    when an enclosing `interruptible()` already handles them, nothing changes)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in HANDLED}
    if all(handler is _raise for handler in previous.values()):
        yield
        return
    for s in HANDLED:
        signal.signal(s, _raise)
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
