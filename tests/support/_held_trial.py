"""A trial process held at a known point, for tests that stop a run while a trial is in flight.

A sitecustomize on PYTHONPATH (passed down to trial processes and Slurm jobs like any variable)
wraps `suite.workloads.training.measure` in trial processes whose resolution is listed in the hold
file: the process builds its real workload, writes `<hold>.reached`, then waits while the hold
file exists. A test knows the trial is in flight (past its start-up, where a slow machine would
otherwise make "in flight" a matter of timing), signals the run, and deletes the hold file before
rerunning so the trial trains."""

import json
import os
import time
from pathlib import Path

import psutil

# a spec of two one-step trials: the first trains, the second (48 px) is the one tests hold
TWO = """
name = "two"
[defaults]
steps = 1
warmup_steps = 0
timeout = 900
[[study]]
name = "g"
kind = "sweep"
workload = "googlenet"
batch = 1
resolutions = [32, 48]
"""

SITECUSTOMIZE = """
import os

_hold = os.environ.get("SUITE_TEST_HOLD")
try:
    _args = open("/proc/self/cmdline", "rb").read().split(b"\\0") if _hold else []
except OSError:
    _args = []
if b"suite.running.trial_worker" in _args and os.path.exists(_hold):
    import json

    _params = json.load(open(_args[_args.index(b"suite.running.trial_worker") + 1]))
    if _params.get("resolution") in json.load(open(_hold)):
        import time

        from suite.workloads import training

        _measure = training.measure

        def _held(*args, **kwargs):
            with open(_hold + ".reached", "a") as reached:
                reached.write(f"{os.getpid()}\\n")
            while os.path.exists(_hold):
                time.sleep(0.2)
            return _measure(*args, **kwargs)

        training.measure = _held
"""


class HeldTrial:
    """Trials of the `resolutions` held in `measure` until `release()`; `env` for the run."""

    def __init__(self, tmp_path: Path, resolutions: list[int]):
        self.hold = tmp_path / "hold"
        self.hold.write_text(json.dumps(resolutions))
        self.reached = Path(f"{self.hold}.reached")
        site = tmp_path / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        self.tmpdir = tmp_path / "tmp"  # the run's TMPDIR: its trials' scratch directories
        self.tmpdir.mkdir()
        held = {"SUITE_TEST_HOLD": str(self.hold), "TMPDIR": str(self.tmpdir)}
        self.env = {**os.environ, "PYTHONPATH": str(site), **held}

    def wait_reached(self, count: int = 1, process=None, timeout: float = 600) -> None:
        """Wait until `count` held trials are in `measure` (failing early if `process`, the run,
        ended first)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.reached.exists() and len(self.reached.read_text().split()) >= count:
                return
            if process is not None and process.poll() is not None:
                raise AssertionError(
                    f"the run ended (rc {process.returncode}) before a trial "
                    f"was held: {process.communicate()}"
                )
            time.sleep(0.2)
        raise AssertionError(f"no held trial after {timeout}s")

    def release(self) -> None:
        """Let held trials train (a test that failed leaves none waiting for ever)."""
        self.hold.unlink(missing_ok=True)

    def trial_processes(self, under: Path | None = None) -> list[psutil.Process]:
        """Trial processes of this run, wherever they are now (re-parented or not): their
        command line names a parameter file under `under` (default: the run's TMPDIR, where a
        native trial's scratch is)."""
        found = []
        for process in psutil.process_iter(["cmdline"]):
            line = " ".join(process.info["cmdline"] or [])
            if "suite.running.trial_worker" in line and str(under or self.tmpdir) in line:
                found.append(process)
        return found

    def scratch(self) -> list[Path]:
        return sorted(self.tmpdir.glob("trial-*"))


def ended(process: psutil.Process) -> bool:
    """Whether `process` is gone, or a zombie (dead; re-parented, its new parent may not reap
    it at once, or at all where PID 1 is not an init)."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(condition, timeout: float, what: str) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.25)
    raise AssertionError(f"{what}: still not so after {timeout}s")
