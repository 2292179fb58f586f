"""What a run of `inv gpucheck` found (suite/running/gpucheck.py runs it): each check's outcome,
the run as its record and its summary hold it (suite/records/gpucheck.py, schema version 1), and
the run in the words the command and the report's hosts table use.

Apart from running the checks, so that the report (suite/reporting/report.py) reads a host's
check in the same words without the code that starts processes. Needs no TensorFlow.
"""

import socket
from dataclasses import asdict, dataclass, field

from suite.records.gpucheck import SCHEMA_VERSION
from suite.records.hosts import GpuCheck
from suite.running.gpucheck_checks import EXPECT


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


def clock(seconds: float) -> str:
    """Seconds as minutes:seconds, as the run prints its elapsed time."""
    minutes, secs = divmod(int(seconds), 60)
    return f"{minutes}:{secs:02d}"


def verdict_line(run: GpuCheckRun) -> str:
    """The run's one-line verdict, in the words of the report's hosts table (`check_text`)."""
    return f"GPU check: {check_text(GpuCheck(**run.summary()))} in {clock(run.seconds)}"


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
