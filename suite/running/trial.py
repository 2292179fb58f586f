"""Run one trial in its own process with a timeout, and classify how it ended.

One process per trial because TensorFlow never gives device memory back inside a process, and an
out-of-memory, a crash or a hang must not take the sweep down. The child is
`suite.running.trial_worker`; its output goes to a log file kept beside the results so a crash
can be read afterwards.

Stopping: the child runs in its own session (a time-out kills its whole process group), so a
Ctrl-C in the terminal does not reach it. When the run is interrupted (SIGINT, SIGTERM:
suite.running.interrupts) while it waits, it kills the trial's process group, waits for it, lets
the scratch directory go, and raises `TrialStopped`: the trial has no record and a rerun redoes
it. If the run itself is killed (SIGKILL), the child notices on its own (`--parent`, see
suite/running/orphan_guard.py), removes the scratch directory and ends.
"""

import contextlib
import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite.environment import child_environment
from suite.records import TrialResult, read_result
from suite.running.interrupts import RunInterrupted
from suite.running.trial_worker import params_text
from suite.specs.model import TrialParams


class TrialStopped(RunInterrupted):
    """A trial's process (or job) was stopped because the run was interrupted; it has no result.
    `detail`: what else was stopped with it, e.g. "slurm job 12 cancelled"."""

    def __init__(self, signal_name: str, detail: str | None = None):
        super().__init__(signal_name)
        self.detail = detail


def interrupt_signal(error: BaseException) -> str:
    """The signal behind an interruption: RunInterrupted names it; KeyboardInterrupt is SIGINT."""
    return getattr(error, "signal_name", "SIGINT")


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


VMSTAT = Path("/proc/vmstat")
OOM_KILLED = (
    "host memory: the kernel's OOM killer ended the trial process (its count of kills in "
    "/proc/vmstat rose while the trial ran)"
)


def oom_kills(since: int | None = None) -> int | None:
    """The kernel's count of OOM-killer kills since boot (/proc/vmstat `oom_kill`), or with
    `since` how many came after that count; None where it cannot be read (not Linux, a kernel
    before 4.13). A trial killed by SIGKILL while the count rose was killed for host memory:
    a recorded result (out_of_memory), not a crash of the suite's."""
    try:
        for line in VMSTAT.read_text().splitlines():
            if line.startswith("oom_kill "):
                count = int(line.split()[1])
                return count if since is None else count - since
    except OSError:
        pass
    return None


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def _kill_group(process: subprocess.Popen) -> None:
    """SIGKILL the trial's process group (the trial and any replica workers) and reap it."""
    with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def run_trial(
    params: TrialParams,
    timeout_s: float,
    log_path: Path,
    extra_env: dict[str, str] | None = None,
    host_disk: Path | None = None,
) -> TrialResult:
    """Run the trial `params` in a fresh Python process; never raises for the trial's failures,
    only `TrialStopped` when the run is interrupted (the process is gone by then).

    `extra_env` is added to the child's environment (the container runner and tests use it);
    `host_disk` is the directory this host lends LMS (`inv run --host-disk`), handed to the
    process beside the parameters, not among them (suite/running/trial_worker.py).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = child_environment(extra_env)
    kills_before = oom_kills()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trial-") as scratch, open(log_path, "wb") as log:
        params_file, result_file = Path(scratch, "params.json"), Path(scratch, "result.json")
        params_file.write_text(params_text(params, host_disk))
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "suite.running.trial_worker",
                str(params_file),
                str(result_file),
                "--parent",
                str(os.getpid()),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,  # its own process group: a timeout kills all of it
        )
        try:
            returncode = process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            _kill_group(process)
            error = f"no result after {timeout_s:g}s; killed"
            return TrialResult("timed_out", error=error, wall_s=time.perf_counter() - started)
        except BaseException as error:  # the run is stopping: the trial must not go on alone
            _kill_group(process)
            if isinstance(error, RunInterrupted | KeyboardInterrupt):
                raise TrialStopped(interrupt_signal(error)) from None
            raise
        wall = time.perf_counter() - started
        result = read_result(result_file)
        if result is not None:
            return dataclasses.replace(result, wall_s=wall)
    how = (
        f"killed by {_signal_name(returncode)}"
        if returncode < 0
        else f"exited with code {returncode}"
    )
    error = f"trial process {how} without a result; log tail:\n{_tail(log_path)}"
    if returncode == -signal.SIGKILL and kills_before is not None and oom_kills(kills_before):
        return TrialResult("out_of_memory", error=f"{OOM_KILLED}; {error}", wall_s=wall)
    return TrialResult("crashed", error=error, wall_s=wall)
