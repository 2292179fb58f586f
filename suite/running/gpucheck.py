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
  configuration and TensorFlow's defaults (`lms.grappler_replay`), and the optimized graph of a
  real run;
- e: split pieces give the plain step's updates (and on a GPU move the bytes planned: its copy
  events), and a pinned-memory cap too small for the plan ends in `lms.HostMemoryError`, not a
  re-plan. Its second part runs in a process of its own: the cap is read when TensorFlow starts.

Without a GPU (`--mode two-device`, the default where nvidia-smi lists none), the same checks run
in the two-device mode (lms/target.py: the GPU mechanism run for real on two logical CPU devices)
and say which GPU-only parts did not run and why.

This module needs no TensorFlow: it starts the processes, judges what they found (the judges are
pure functions of lms's reports, tested on their own), prints progress and failures, and records
the outcome: `<results>/gpucheck/<host>.json`, a summary in this machine's state directory that
every host description captured from then on carries (`host_check_summary`, read by
suite/hosts/description.py; the report's hosts table shows it), and the host description itself.
"""

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from suite.environment import child_environment
from suite.errors import SuiteError
from suite.records.files import check_host_name, log_file, utc_now, write_atomic
from suite.records.gpucheck import (  # noqa: F401 (re-exported for the task and the tests)
    SCHEMA_VERSION,
    host_check_summary,
    record_file,
    state_file,
)
from suite.records.hosts import GpuCheck

MODES = ("gpu", "two-device")
NO_GPU = (
    "no GPU here: the two logical CPU devices share the CPU's allocator, so nothing measures the "
    "compute device's own peak"
)

# what a check expects, as data (STYLE 9): a failure line shows the expected and measured values
EXPECT = {
    "peak_model_error": 0.10,  # c: |measured / simulated - 1| of the LMS step's peak
    "drop_share": 0.5,  # c: the measured drop (plain - LMS) is at least this share of the simulated
    "update_rtol": 1e-4,  # e: each variable's update to this share of its own size (fp32) ...
    "update_floor": 1e-6,  # ... or of the whole step's update (rounding of near-zero updates)
    "copy_bytes": (0.5, 1.25),  # e, GPU: copied bytes / planned bytes
}


@dataclass(frozen=True)
class Part:
    """A part of a check that runs in one process: `options` go to the worker, `env` is added
    to its environment."""

    name: str
    options: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        values = (v if isinstance(v, str) else f"{k}{v}" for k, v in self.options.items())
        return "-".join([self.name, *values])  # "memory-fp16-ordering1"


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    parts: tuple  # Part, one process each
    gpu_only: bool = False  # the whole check needs a GPU (parts of others: their worker says)


CHECKS = (
    Check("a", "LMS ops survive Grappler and run where placed", (Part("placement"),)),
    Check(
        "b",
        "every copy back starts after its trigger",
        (Part("timing"),),
    ),
    Check(
        "c",
        "the peak drops as simulated, within 10 %, fp32 and mixed, orderings 0 and 1",
        # a process per row: a row's measured peak holds nothing of another's
        tuple(
            Part("memory", {"precision": precision, "ordering": ordering})
            for precision in ("fp32", "fp16")
            for ordering in (0, 1)
        ),
        gpu_only=True,
    ),
    Check("d", "which Grappler pass changed what", (Part("grappler"),)),
    Check(
        "e",
        "split pieces train as the plain step; a small pinned cap is a HostMemoryError",
        (Part("split"), Part("pinned", env={"TF_GPU_HOST_MEM_LIMIT_IN_MB": "1"})),
    ),
)
CHECK_TIMEOUT_S = 240  # per process; the five checks take about a minute here, a few on a GPU


# --- the judges: pure functions of what a check process found --------------------------------


def placement_failures(report) -> list[str]:
    """Check a (and the split step of e): an `lms.PlacementReport` of one step. Every kept LMS op
    ran, on its device; every swap-in's host-to-device send waits for its trigger; every piece's
    host slice waits for the piece before; Grappler added no swaps and no layout transposes."""
    failures = []
    if not report.planned:
        failures.append("the step has no LMS ops: nothing was checked (the plan swapped nothing)")
    if report.missing:
        failures.append(
            f"{len(report.missing)} of {len(report.planned)} LMS ops did not run (removed by "
            f"Grappler or the partitioner), e.g. {', '.join(report.missing[:3])}"
        )
    if report.misplaced:
        failures.append(
            f"{len(report.misplaced)} LMS ops ran on another device than placed, e.g. "
            + ", ".join(f"{n} on {report.ran[n]}" for n in report.misplaced[:3])
        )
    for check in report.swap_ins:
        if not check.gated:
            why = (
                "did not run"
                if check.device is None
                else f"waits for {check.gate or 'nothing'}"
                if check.send
                else "sends nothing to the device (no _Send of its output)"
            )
            failures.append(
                f"swap-in {check.name} is not gated by its trigger {check.trigger}: {why}"
            )
    ungated_reads = [name for name, gated in report.piece_reads.items() if not gated]
    if ungated_reads:
        failures.append(
            f"{len(ungated_reads)} of {len(report.piece_reads)} piece reads do not wait for the "
            f"piece before, e.g. {ungated_reads[0]}"
        )
    if report.grappler_swaps:
        failures.append(
            f"Grappler's memory optimizer added {len(report.grappler_swaps)} swap ops of its own, "
            f"e.g. {report.grappler_swaps[0]}"
        )
    if report.transposes:
        failures.append(
            f"Grappler's layout optimizer added {len(report.transposes)} transposes, e.g. "
            f"{report.transposes[0]}"
        )
    return failures


def timing_failures(timings, clock: str) -> list[str]:
    """Check b: `lms.PlacementReport.timings` (`clock`: "host" sends or "device" copy events).
    Every swap-in's copy started at or after its trigger ended; none unmatched."""
    if not timings:
        return [f"no swap-in was timed on the {clock} timeline (the step swapped nothing?)"]
    failures = []
    for t in timings:
        if t.start is None or t.trigger_end is None:
            missing = "its copy" if t.start is None else f"its trigger {t.trigger}"
            failures.append(f"swap-in {t.name}: the {clock} timeline has no event of {missing}")
        elif not t.after_trigger:
            failures.append(
                f"swap-in {t.name}: its copy started at {t.start * 1e3:.3f} ms, before its "
                f"trigger {t.trigger} ended at {t.trigger_end * 1e3:.3f} ms ({clock} timeline)"
            )
    return failures


def memory_failures(rows: list[dict]) -> list[str]:
    """Check c, GPU only: per row (precision, ordering) the measured peaks of the plain and the
    LMS step and the simulation's. The measured drop is at least `drop_share` of the simulated
    one, and the LMS step's measured peak is within `peak_model_error` of the simulated."""
    failures = []
    for row in rows:
        label = f"{row['precision']} ordering {row['ordering']}"
        measured_drop = row["plain_peak"] - row["lms_peak"]
        simulated_drop = row["simulated_without"] - row["simulated_with"]
        if measured_drop < EXPECT["drop_share"] * simulated_drop:
            failures.append(
                f"{label}: the peak dropped {_mib(measured_drop)} (plain {_mib(row['plain_peak'])}"
                f", LMS {_mib(row['lms_peak'])}); expected at least {EXPECT['drop_share']:.0%} of "
                f"the simulated drop {_mib(simulated_drop)} ({_mib(row['swapped_bytes'])} swapped)"
            )
        error = row["lms_peak"] / max(row["simulated_with"], 1) - 1
        if abs(error) > EXPECT["peak_model_error"]:
            failures.append(
                f"{label}: measured LMS peak {_mib(row['lms_peak'])} is {error:+.1%} from the "
                f"simulated {_mib(row['simulated_with'])}; expected within "
                f"{EXPECT['peak_model_error']:.0%}"
            )
    return failures


def replay_failures(replays: dict, real: dict | None = None) -> list[str]:
    """Check d: `lms.grappler_replays`' {"lms": ..., "default": ...} and, from a
    real run's optimized graph, {"removed", "grappler_swaps", "transposes"}. With LMS's
    configuration Grappler must keep every LMS op and add no swap and no transpose; what
    TensorFlow's defaults would do is what LMS turns off, not a failure."""
    failures = []
    lms_replay = replays["lms"]
    for key, what in (
        ("removed", "LMS ops removed"),
        ("grappler_swaps", "swap ops of its memory optimizer"),
        ("transposes", "layout transposes"),
    ):
        if lms_replay[key]:
            failures.append(
                f"Grappler replayed on a virtual GPU with LMS's configuration: "
                f"{len(lms_replay[key])} {what}, e.g. {lms_replay[key][0]}"
            )
        if real and real.get(key):
            failures.append(
                f"the step's optimized graph as it ran: {len(real[key])} {what}, "
                f"e.g. {real[key][0]}"
            )
    return failures


def update_failures(found: dict) -> list[str]:
    """Check e: the split step's loss and variable updates against the plain step's (`found`
    from the worker: relative loss difference, the variables whose update differs by more than
    the tolerance)."""
    failures = []
    if not found["splits"]:
        failures.append("the plan split no op: nothing was checked")
    if found["loss_relative"] > EXPECT["update_rtol"]:
        failures.append(
            f"split step's loss {found['loss']:.7g} vs plain {found['plain_loss']:.7g}: "
            f"{found['loss_relative']:.2g} relative, over {EXPECT['update_rtol']:g}"
        )
    if found["mismatched"]:
        worst = max(found["mismatched"], key=lambda m: m[1])
        failures.append(
            f"{len(found['mismatched'])} of {found['variables']} variables updated differently "
            f"from the plain step, worst {worst[0]} by {worst[1]:.2g} relative (tolerance "
            f"{EXPECT['update_rtol']:g})"
        )
    return failures


def copy_bytes_failures(planned: int, copied: int) -> list[str]:
    """Check e, GPU only: the bytes the copy events moved against the bytes the plan moves."""
    low, high = EXPECT["copy_bytes"]
    ratio = copied / planned if planned else float("inf")
    if planned and low <= ratio <= high:
        return []
    return [
        f"the copy events moved {_mib(copied)}, the plan {_mib(planned)} ({ratio:.2f}x; "
        f"expected {low:g}x to {high:g}x)"
    ]


def pinned_failures(found: dict) -> list[str]:
    """Check e: with TF_GPU_HOST_MEM_LIMIT_IN_MB=1 the step's first call raised
    lms.HostMemoryError (saying how to raise the cap) and made no second plan."""
    if found["raised"] != "HostMemoryError":
        what = "ran" if found["raised"] is None else f"raised {found['raised']}"
        return [
            f"with a pinned host cap of 1 MiB the split step {what} instead of raising "
            f"lms.HostMemoryError: {found.get('message') or ''}".rstrip(": ")
        ]
    failures = []
    if "TF_GPU_HOST_MEM_LIMIT_IN_MB" not in found["message"]:
        failures.append(
            f"the HostMemoryError does not say how to raise the cap: {found['message']}"
        )
    if found["plans"] > 1:
        failures.append(f"LMS planned {found['plans']} times before giving up: a re-plan")
    return failures


def _mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"


# --- running the checks ----------------------------------------------------------------------


@dataclass
class CheckOutcome:
    """What one check found: `status` "passed", "failed" or "not run" (GPU-only, no GPU)."""

    id: str
    title: str
    status: str
    findings: list = field(default_factory=list)  # what was seen, one line each
    failures: list = field(default_factory=list)
    not_run: list = field(default_factory=list)  # GPU-only parts that did not run, and why
    seconds: float = 0.0
    data: dict = field(default_factory=dict)  # per part (its label), what its process found
    tensorflow_version: str | None = None


@dataclass
class GpuCheckRun:
    host: str
    mode: str
    started_at: str
    checks: list  # CheckOutcome
    seconds: float = 0.0
    tensorflow_version: str | None = None
    host_ref: str | None = None

    def count(self, status: str) -> int:
        return sum(1 for c in self.checks if c.status == status)

    @property
    def failures(self) -> list[str]:
        return [f"check {c.id} ({c.title}): {f}" for c in self.checks for f in c.failures]

    def summary(self) -> dict:
        """What a host description carries (suite.records.hosts.GpuCheck)."""
        return {
            "version": SCHEMA_VERSION,
            "checked_at": self.started_at,
            "mode": self.mode,
            "passed": self.count("passed"),
            "failed": self.count("failed"),
            "not_run": self.count("not run"),
            "of": len(self.checks),
            "tensorflow_version": self.tensorflow_version,
        }

    def to_dict(self) -> dict:
        return {
            "schema": SCHEMA_VERSION,
            "host": self.host,
            "hostname": socket.gethostname(),
            "mode": self.mode,
            "started_at": self.started_at,
            "seconds": round(self.seconds, 1),
            "ok": not self.failures,
            **{k: v for k, v in self.summary().items() if k != "version"},
            "expect": EXPECT,
            "host_ref": self.host_ref,
            "checks": [asdict(c) for c in self.checks],
        }


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


def _clock(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


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
        elapsed = _clock(time.perf_counter() - started)
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


def verdict_line(run: GpuCheckRun) -> str:
    """The run's one-line verdict, in the words of the report's hosts table (`check_text`)."""
    return f"GPU check: {check_text(GpuCheck(**run.summary()))} in {_clock(run.seconds)}"


def check_text(check: GpuCheck | None) -> str:
    """A host description's `gpu_check` in words, as the report's hosts table shows it:
    "passed 5/5 (2026-11-27)", "passed 4/5, 1 GPU-only not run (two-device, 2026-11-27)",
    "FAILED 1 of 5 (gpu, 2026-11-27)", "not run"."""
    if check is None:
        return "not run"
    date = check.checked_at[:10]
    if check.failed:
        return f"FAILED {check.failed} of {check.of} ({check.mode}, {date})"
    text = f"passed {check.passed}/{check.of}"
    if check.not_run:
        text += f", {check.not_run} GPU-only not run"
    where = "" if check.mode == "gpu" else f"{check.mode}, "
    return f"{text} ({where}{date})"


# --- recording -------------------------------------------------------------------------------


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
