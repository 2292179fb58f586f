"""`inv gpucheck`: the checks that accept a GPU host before anyone trusts its numbers (issue 41
item 6; /work/shared/gpu-desk-check.md, "First run on a real GPU: five checks").

Five checks of LMS's GPU path on a small convolutional step, each in a fresh process
(`suite.running.gpucheck_worker`; c one per precision and ordering, e one per part):

- a: every LMS op survived Grappler and ran where it was placed (`lms.check_step`);
- b: every copy back to the device started after its trigger: on a GPU the profile's
  host-to-device copy events against the trigger's kernel, on the CPU the host-side sends
  (`lms.check_step(..., timed=True)`);
- c (GPU only): the measured peak drops by about what the simulation says, and the simulated
  peak is within 10 % of the measured one, fp32 and mixed precision, orderings 0 and 1;
- d: which of Grappler's passes changed what: the replay on a virtual GPU with LMS's
  configuration and TensorFlow's defaults (`lms.grappler_replays`), and the optimized graph of a
  real run;
- e: split pieces give the plain step's updates (and on a GPU move the bytes planned: its copy
  events), and a pinned-memory cap too small for the plan ends in `lms.HostMemoryError`, not a
  re-plan. Its second part runs in a process of its own: the cap is read when TensorFlow starts.

Without a GPU (`--mode two-device`, the default where nvidia-smi lists none), the same checks run
in the two-device mode (lms/device/target.py: the GPU mechanism run for real on two logical CPU
devices) and say which GPU-only parts did not run and why.

This module needs no TensorFlow: it starts the processes, prints progress and failures, and
records the outcome: `<results>/gpucheck/<host>.json`, a summary in this machine's state directory
that every host description captured from then on carries (`host_check_summary`, read by
suite/hosts/description.py; the report's hosts table shows it), and the host description itself.
Its siblings: the checks as data (gpucheck_checks.py), their judges, pure functions of lms's
reports (gpucheck_judges.py), what a run found and its words (gpucheck_outcome.py); in the check
processes, the entry (gpucheck_worker.py), the step they build (gpucheck_case.py) and their parts
(gpucheck_parts.py for checks a to d, gpucheck_split.py for e).
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from suite.environment import child_environment
from suite.errors import SuiteError
from suite.records.files import check_host_name, log_file, utc_now, write_atomic
from suite.records.gpucheck import record_file, state_file
from suite.running.gpucheck_checks import CHECK_TIMEOUT_S, CHECKS, MODES, NO_GPU, Check, Part
from suite.running.gpucheck_outcome import (  # noqa: F401 (check_text: see below)
    CheckOutcome,
    GpuCheckRun,
    check_text,  # the run in words, named here too for the report (suite/reporting/report.py)
    clock,
    verdict_line,
)


def default_mode() -> str:
    """ "gpu" where a GPU is visible (nvidia-smi lists one and CUDA_VISIBLE_DEVICES does not hide
    it), else "two-device". Asked without TensorFlow: in this process it would hold the GPU."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1"):
        return "two-device"
    if shutil.which("nvidia-smi") is None:
        return "two-device"
    listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=60)
    return "gpu" if listed.returncode == 0 and "GPU" in listed.stdout else "two-device"


def run_part(check: Check, part: Part, mode: str, log_path: Path) -> dict:
    """One process of a check: `python -m suite.running.gpucheck_worker REQUEST ANSWER`, its
    output in `log_path`; its answer (a dict), or {"error": ...} when it crashed or timed out."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="suite-gpucheck-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        request.write_text(
            json.dumps({"check": check.id, "part": part.name, "mode": mode, **part.options})
        )
        command = [
            sys.executable,
            "-m",
            "suite.running.gpucheck_worker",
            str(request),
            str(answer),
            f"--parent={os.getpid()}",
        ]
        with open(log_path, "w") as log:
            try:
                completed = subprocess.run(
                    command,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=child_environment(part.env),
                    timeout=CHECK_TIMEOUT_S,
                )
            except subprocess.TimeoutExpired:
                return {"error": f"timed out after {CHECK_TIMEOUT_S} s (log: {log_path})"}
        if completed.returncode != 0 or not answer.exists():
            lines = log_path.read_text(errors="replace").strip().splitlines()
            last = lines[-1] if lines else "no output"
            return {"error": f"exit {completed.returncode}: {last[:300]} (log: {log_path})"}
        return json.loads(answer.read_text())


def run_check(check: Check, mode: str, results_dir: Path, host: str, runner=None):
    """All parts of `check` (one process each) as one CheckOutcome. A GPU-only check is not run
    without a GPU. `runner`: how a part runs (default `run_part`; tests give their own)."""
    runner = runner or run_part
    started = time.perf_counter()
    outcome = CheckOutcome(check.id, check.title, "passed")
    if mode != "gpu" and check.gpu_only:
        outcome.status = "not run"
        outcome.not_run.append(f"GPU only, {NO_GPU}")
        return outcome
    for part in check.parts:
        path = log_file(results_dir, host, f"gpucheck-{check.id}-{part.label}")
        answer = runner(check, part, mode, path)
        if "fatal" in answer:
            raise SuiteError(answer["fatal"])
        if "error" in answer:
            outcome.failures.append(f"{part.label}: the check's process failed: {answer['error']}")
            continue
        outcome.findings += answer.get("findings", [])
        outcome.failures += answer.get("failures", [])
        outcome.not_run += answer.get("not_run", [])
        outcome.data[part.label] = answer.get("data", {})
        outcome.tensorflow_version = answer.get("tensorflow_version")
    if outcome.failures:
        outcome.status = "failed"
    outcome.seconds = round(time.perf_counter() - started, 1)
    return outcome


def run_gpucheck(
    results_dir: Path, host: str | None = None, mode: str | None = None, echo=print, runner=None
) -> GpuCheckRun:
    """Run the five checks (module docstring), printing progress; record and return the run.
    The caller fails the command when `run.failures` is not empty."""
    from suite.running.executor import default_host_name

    if mode is not None and mode not in MODES:
        raise SuiteError(f"--mode {mode!r}: one of {', '.join(MODES)}")
    mode = mode or default_mode()
    host = check_host_name(host or default_host_name())
    run = GpuCheckRun(host, mode, utc_now(), [])
    processes = sum(len(c.parts) for c in CHECKS if mode == "gpu" or not c.gpu_only)
    echo(
        f"GPU check of host {host}, mode {mode}"
        + ("" if mode == "gpu" else " (no GPU: the GPU mechanism on two logical CPU devices)")
        + f": {len(CHECKS)} checks in {processes} fresh processes"
    )
    started = time.perf_counter()
    for index, check in enumerate(CHECKS, 1):
        echo(f"check {index} of {len(CHECKS)} ({check.id}): {check.title} ...")
        outcome = run_check(check, mode, Path(results_dir), host, runner)
        run.checks.append(outcome)
        run.tensorflow_version = run.tensorflow_version or outcome.tensorflow_version
        for line in outcome.findings:
            echo(f"  {line}")
        for line in outcome.not_run:
            echo(f"  not run: {line}")
        for line in outcome.failures:
            echo(f"  FAILED: {line}")
        elapsed = clock(time.perf_counter() - started)
        echo(f"  {outcome.status} in {outcome.seconds:.1f} s (elapsed {elapsed})")
    run.seconds = time.perf_counter() - started
    skipped = [c.id for c in run.checks if c.not_run]
    if skipped:
        which = f"check{'s' if len(skipped) > 1 else ''} {', '.join(skipped)}"
        echo(
            f"GPU-only parts of {which} did not run (no GPU); run `inv gpucheck` on the GPU host "
            "to accept it"
        )
    return run


# --- recording -------------------------------------------------------------------------------


def recorded_lines(run: GpuCheckRun, path: Path) -> list[str]:
    """What `inv gpucheck` says of a run recorded at `path`: its verdict, and where it is kept."""
    return [
        verdict_line(run),
        f"recorded: {path} and host description {run.host_ref}; trials run on this machine "
        "from now on carry it (the report's hosts table)",
    ]


def record(run: GpuCheckRun, results_dir: Path, describe=None) -> Path:
    """Record `run`: the state summary first (so that the host description captured next carries
    it), the host description (stored under its hash), then `<results>/gpucheck/<host>.json`
    naming that description. `describe`: how the description is captured (tests give theirs)."""
    from suite.records import store_host

    write_atomic(state_file(), json.dumps(run.summary(), indent=1, sort_keys=True))
    if describe is None:
        from suite.hosts.description import capture_host_description as describe
    run.host_ref = store_host(results_dir, describe())
    path = record_file(results_dir, run.host)
    write_atomic(path, json.dumps(run.to_dict(), indent=1, sort_keys=True))
    return path
