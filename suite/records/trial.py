"""The trial record: one trial process's result with what it was and where it ran. `TrialResult`
is what a trial process writes (the worker's file), `TrialRecord` what the results file keeps
(`<results>/<host>.jsonl`). `from_dict` reads and validates (a missing or mistyped field is a
`DamagedRecord` naming it), `to_dict` writes; on disk the keys are those of schema 1, with
`schema: 2`."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from suite.errors import SuiteError
from suite.records.fields import (
    INTEGER,
    STRING,
    TABLE,
    DamagedRecord,
    Table,
    fields_of,
    read,
    read_fields,
)
from suite.records.files import write_atomic
from suite.records.metrics import OUTCOMES, Metrics
from suite.specs.model import TrialParams

SCHEMA_VERSION = 2


@dataclass(frozen=True)
class TrialResult:
    """How one trial process ended: what the worker writes (`to_dict`) and its parent reads
    back (`from_dict`); `wall_s` is the parent's measure of the process, not in the file."""

    outcome: str = field(metadata={"choices": OUTCOMES})
    metrics: Metrics | None = None
    error: str | None = None
    device: str | None = None
    wall_s: float = 0.0

    def __post_init__(self):
        check_outcome(self.outcome, self.metrics, "trial result")

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_dict(self) -> dict:
        values = fields_of(self)
        del values["wall_s"]
        return values

    @classmethod
    def from_dict(cls, values: dict, where: str = "trial result") -> "TrialResult":
        t = Table(values, where)
        _check_stored(t)
        return read(cls, t)


def write_result(path: Path, result: TrialResult) -> None:
    """A trial process's result, for its parent (atomically: a reader sees all of it or none);
    a DamagedRecord if it would not read back."""
    values = result.to_dict()
    TrialResult.from_dict(values, str(path))
    write_atomic(path, json.dumps(values))


def read_result(path: Path) -> TrialResult | None:
    """The result a trial process wrote to `path`; None if it wrote none; one that cannot be
    read is a crash, saying why."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        return TrialResult.from_dict(json.loads(path.read_text()), str(path))
    except json.JSONDecodeError as error:
        problem = f"not valid JSON ({error.msg})"
    except DamagedRecord as error:
        problem = error.problem
    return TrialResult("crashed", error=f"the trial process wrote an unreadable result: {problem}")


@dataclass(frozen=True)
class SpecRef:
    """Which spec and study a record belongs to; `search` (its hash) or `sweep` ("switch") when
    a limit search or a switch sweep ran the trial."""

    SPARSE = True
    name: str
    study: str
    source: str | None = None
    search: str | None = None
    sweep: str | None = None


# a trial parameter's kind, and whether it may be null
PARAM_KINDS = {
    "workload": (STRING, False),
    "resolution": (INTEGER, True),  # null in a search's template
    "batch": (INTEGER, True),
    "precision": (STRING, False),
    "classes": (INTEGER, False),
    "steps": (INTEGER, False),
    "warmup_steps": (INTEGER, False),
    "data": (TABLE, False),
    "memory_budget_bytes": (INTEGER, True),
    "seed": (INTEGER, False),
    "lms": (TABLE, True),
    "gpus": (INTEGER, False),
    "nodes": (INTEGER, False),
}


def read_params(t: Table, key: str = "params", null: bool = False, default=None) -> TrialParams:
    """A record's trial parameters, typed and checked: each field's type, and a known workload
    (the report looks its rates and units up)."""
    p = t.table(key)
    for name, (kind, nullable) in PARAM_KINDS.items():
        if name in p.values:
            p(name, kind, nullable)
    try:
        params = TrialParams.from_dict(p.values)
        params.info  # noqa: B018 (a workload this suite knows)
    except (TypeError, ValueError, SuiteError) as error:
        raise DamagedRecord(t.where, f"field {p.path!r}: {error}") from None
    return params


PARAMS = {"read": read_params}  # a record field's metadata: its TrialParams read and checked


def check_outcome(outcome: str, metrics, where: str) -> None:
    """What the report relies on beyond the types: a known outcome, and a trained trial's
    images/sec."""
    if outcome not in OUTCOMES:
        raise DamagedRecord(where, f"outcome {outcome!r} is not one of {', '.join(OUTCOMES)}")
    if outcome == "ok" and (metrics is None or metrics.images_per_sec is None):
        raise DamagedRecord(where, "an 'ok' record must carry metrics with 'images_per_sec'")


def _check_stored(t: Table) -> None:
    """check_outcome on a stored record or result, naming its file and line."""
    metrics = t.table("metrics", null=True)
    check_outcome(t("outcome", STRING), metrics and read(Metrics, metrics), t.where)


@dataclass(frozen=True)
class TrialRecord:
    """One trial process as the results file keeps it (`<results>/<host>.jsonl`)."""

    spec: SpecRef
    spec_hash: str
    params: TrialParams = field(metadata=PARAMS)
    repeat: int
    host: str
    host_ref: str
    outcome: str
    metrics: Metrics | None
    error: str | None
    device: str | None
    started_at: str
    finished_at: str
    wall_s: float
    log: str | None = None
    run: str | None = None  # the run it belongs to (inv baseline, inv regress)
    image: str | None = None  # the container image it ran in; None: natively

    def __post_init__(self):
        where = f"trial record {self.spec_hash} repeat {self.repeat} of host {self.host}"
        check_outcome(self.outcome, self.metrics, where)

    @property
    def ok(self) -> bool:
        return self.outcome == "ok"

    def to_dict(self) -> dict:
        return {"schema": SCHEMA_VERSION, **fields_of(self)}

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "TrialRecord":
        """A schema-2 record (migrate.py brings a schema-1 one to this form first)."""
        t = Table(values, where)
        _check_stored(t)
        return read_fields(cls, t)
