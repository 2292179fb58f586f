"""Run one trial in its own process with a timeout, and classify how it ended.

One process per trial because TensorFlow never gives device memory back inside a process, and an
out-of-memory, a crash or a hang must not take the sweep down. The child is
`suite.running.trial_worker`; its output goes to a log file kept beside the results so a crash
can be read afterwards.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from suite.environment import child_environment
from suite.specs.model import TrialParams


@dataclass
class TrialResult:
    outcome: str
    metrics: dict | None
    error: str | None
    device: str | None
    wall_s: float
    returncode: int | None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _signal_name(returncode: int) -> str:
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def run_trial(
    params: TrialParams, timeout_s: float, log_path: Path, extra_env: dict[str, str] | None = None
) -> TrialResult:
    """Run the trial `params` in a fresh Python process; never raises for the trial's failures.

    `extra_env` is added to the child's environment (the container runner and tests use it).
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = child_environment(extra_env)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="trial-") as scratch, open(log_path, "wb") as log:
        params_file, result_file = Path(scratch, "params.json"), Path(scratch, "result.json")
        params_file.write_text(json.dumps(params.to_dict()))
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "suite.running.trial_worker",
                str(params_file),
                str(result_file),
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
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            return TrialResult(
                "timed_out",
                None,
                f"no result after {timeout_s:g}s; killed",
                None,
                time.perf_counter() - started,
                None,
            )
        wall = time.perf_counter() - started
        if result_file.exists():
            result = json.loads(result_file.read_text())
            return TrialResult(
                result["outcome"],
                result["metrics"],
                result["error"],
                result["device"],
                wall,
                returncode,
            )
    how = (
        f"killed by {_signal_name(returncode)}"
        if returncode < 0
        else f"exited with code {returncode}"
    )
    return TrialResult(
        "crashed",
        None,
        f"trial process {how} without a result; log tail:\n{_tail(log_path)}",
        None,
        wall,
        returncode,
    )
