"""The regression gate's baseline (`inv baseline`, read by `inv regress`): per host and spec hash,
each trial process of an accepted run, its images/sec and the machine's speed around it
(`training.machine_speed`). The unit of evidence is the process (suite.reporting.regress says
why). Typed here, written and read here: a baseline that loads has every field `compare` reads.
"""

import dataclasses
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from suite.errors import SuiteError
from suite.records import DamagedRecord, TrialRecord, load_trials, utc_now, write_atomic
from suite.records.fields import STRING, Table, read_fields

BASELINE_VERSION = 2  # 2: per trial process, with the machine speed (1: per step)


@dataclass(frozen=True)
class Process:
    """What one trial process that trained contributes."""

    rate: float  # images/sec, the mean over its steps
    machine_speed: float | None  # None: a record from before it was measured

    @classmethod
    def of(cls, record: TrialRecord) -> "Process":
        speed = record.metrics.machine_speed
        return cls(record.metrics.images_per_sec.mean, speed.mean if speed else None)


@dataclass(frozen=True)
class Entry:
    """The accepted run of one host and spec hash."""

    host: str
    spec_hash: str
    workload: str
    resolution: int | None
    batch: int | None
    images_per_sec: float  # the mean over its processes
    processes: tuple[Process, ...]
    params: dict | None = None  # what the table tells rows apart by; absent in older baselines
    run: str | None = None


@dataclass(frozen=True)
class Baseline:
    accepted_at: str
    entries: dict[str, Entry]  # "host/spec_hash" -> entry

    def to_dict(self) -> dict:
        entries = {key: dataclasses.asdict(entry) for key, entry in self.entries.items()}
        return {"version": BASELINE_VERSION, "accepted_at": self.accepted_at, "entries": entries}


def newest_runs(records: list[TrialRecord]) -> dict:
    """{(host, spec_hash): [records of the newest run]} (a run: records sharing `run`)."""
    grouped = defaultdict(list)
    for record in records:
        grouped[(record.host, record.spec_hash)].append(record)
    newest = {}
    for key, group in grouped.items():
        last = max(group, key=lambda r: r.finished_at)
        newest[key] = [r for r in group if r.run == last.run] if last.run else [last]
    return newest


def make_baseline(results_dir: Path, path: Path) -> Baseline:
    """Accept the newest run of every (host, spec hash) that trained as the baseline."""
    entries = {}
    for (host, spec_hash), run in sorted(newest_runs(load_trials(results_dir)).items()):
        ok = [r for r in run if r.ok]
        if not ok:
            continue
        processes = tuple(map(Process.of, ok))
        params = ok[0].params
        entries[f"{host}/{spec_hash}"] = Entry(
            host=host,
            spec_hash=spec_hash,
            workload=params.workload,
            resolution=params.resolution,
            batch=params.batch,
            images_per_sec=statistics.fmean(p.rate for p in processes),
            processes=processes,
            params=params.to_dict(),
            run=ok[0].run,
        )
    if not entries:
        raise SuiteError(f"no trained records in {results_dir} to make a baseline of")
    baseline = Baseline(utc_now(), entries)
    write_atomic(path, json.dumps(baseline.to_dict(), indent=1, sort_keys=True))
    return baseline


def load_baseline(path: Path) -> Baseline:
    """The baseline `inv baseline` wrote to `path`; a SuiteError saying what to run otherwise."""
    try:
        values = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SuiteError(f"baseline {path} does not exist: make one with `inv baseline`") from None
    except json.JSONDecodeError as error:
        raise SuiteError(f"baseline {path}: not valid JSON ({error})") from None
    except OSError as error:  # a directory, unreadable
        raise SuiteError(
            f"baseline {path}: cannot read it ({error.strerror}); give the "
            "baseline file `inv baseline` wrote"
        ) from None
    version = values.get("version") if isinstance(values, dict) else None
    if version != BASELINE_VERSION or "entries" not in values:
        raise SuiteError(
            f"baseline {path}: version {version!r}; this suite reads version {BASELINE_VERSION}"
        )
    try:
        t = Table(values, str(path))
        entries = t.table("entries")
        read = {key: read_fields(Entry, entries.table(key)) for key in entries.values}
        return Baseline(t("accepted_at", STRING), read)
    except DamagedRecord as error:
        raise SuiteError(
            f"baseline {path}: {error.problem}; make it again with `inv baseline`"
        ) from None
