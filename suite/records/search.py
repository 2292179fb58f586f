"""The limit-search record (`<results>/searches/<host>.jsonl`: the largest size that trained,
the trials behind it, the boundary's margin and verdict) and the prediction record
(`<results>/predictions/<host>.jsonl`: the simulator's bracket, a cache of searches)."""

import json
from dataclasses import dataclass, field
from pathlib import Path

from suite.records.fields import INTEGER, DamagedRecord, Table, fields_of, read_fields
from suite.records.files import write_atomic
from suite.records.metrics import OUTCOMES
from suite.records.trial import PARAMS, SCHEMA_VERSION, SpecRef
from suite.specs.model import TrialParams

# a search record's boundary verdicts (suite/running/boundary.py decides them)
BOUNDARY_VERDICTS = ("clear", "confirmed", "uncertain")
OUTCOME = {"choices": OUTCOMES}


@dataclass(frozen=True)
class ProcessMargin:
    """One process at a boundary size: outcome, peak, and its margin to the budget."""

    repeat: int
    outcome: str = field(metadata=OUTCOME)
    peak_memory_bytes: int | None = None
    margin_bytes: int | None = None  # budget - peak: < 0 over the budget
    peak_ratio: float | None = None


@dataclass(frozen=True)
class BoundarySide:
    """The largest size that trained (`limit`) or the smallest that did not (`failed`)."""

    value: int
    spec_hash: str
    processes: tuple[ProcessMargin, ...]


@dataclass(frozen=True)
class Boundary:
    """A search's boundary weighed against the budget (suite.running.boundary): each side (None
    when absent), the budget, the spread band, the repeats the spec asks for, nearness, and
    the verdict."""

    limit: BoundarySide | None
    failed: BoundarySide | None
    budget_bytes: int | None
    spread: float
    repeats: int
    near: bool
    verdict: str = field(metadata={"choices": BOUNDARY_VERDICTS})


@dataclass(frozen=True)
class SearchTrial:
    """A search record's line for one trial process."""

    value: int
    spec_hash: str
    repeat: int
    outcome: str = field(metadata=OUTCOME)
    reused: bool = False
    peak_memory_bytes: int | None = None
    images_per_sec: float | None = None  # its mean


@dataclass(frozen=True)
class SearchPrediction:
    """What the simulator predicted for the search, in the searched unit."""

    largest_fit: int | None
    nothing_fits: bool
    seconds: float | None
    error: str | None


def _range(t: Table, key: str, null: bool, default) -> tuple[int, int, int]:
    values = t(key, (_three_integers, "a list of three integers: start, stop, step"))
    return tuple(values)


def _three_integers(value) -> bool:
    return isinstance(value, list) and len(value) == 3 and all(INTEGER[0](v) for v in value)


@dataclass(frozen=True)
class SearchRecord:
    """One limit search with LMS off or on, on one host."""

    kind: str = field(metadata={"choices": ("max-resolution", "max-batch")})
    search_hash: str
    limit_key: str  # pairs the LMS-off and LMS-on searches of one limit
    mode: str = field(metadata={"choices": ("off", "on")})
    spec: SpecRef
    params: TrialParams = field(metadata=PARAMS)  # the template: the searched field is None
    lms: dict | None
    searched: str = field(metadata={"choices": ("resolution", "batch")})
    range: tuple[int, int, int] = field(metadata={"read": _range})  # start, stop, step
    largest_ok: int | None
    smallest_failed: int | None
    failed_outcome: str | None = field(metadata=OUTCOME)
    stop_reached: bool
    trials: tuple[SearchTrial, ...]
    trials_run: int
    boundary: Boundary | None  # None: not measured (records before the boundary)
    prediction: SearchPrediction | None
    host: str
    host_ref: str
    started_at: str
    finished_at: str

    def to_dict(self) -> dict:
        return {"schema": SCHEMA_VERSION, **fields_of(self)}

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "SearchRecord":
        return read_fields(cls, Table(values, where))


@dataclass(frozen=True)
class Probe:
    """One size the simulator traced: whether it fits, against which budgets, its peaks."""

    fits: bool
    budget_bytes: int
    lms_budget_bytes: int | None = None  # absent: not even the closest plan
    peak_bytes_without_lms: int | None = None
    peak_bytes_with_lms: int | None = None


def _probes(t: Table, key: str, null: bool, default) -> dict[int, Probe]:
    probes = t.table(key)
    found = {}
    for index in probes.values:
        if not index.isdigit():
            raise probes.damaged(index, "is not a candidate's index")
        found[int(index)] = read_fields(Probe, probes.table(index))
    return found


@dataclass(frozen=True)
class PredictionRecord:
    """The simulator's bracket of a search (suite.running.predict): the index of the largest
    candidate that fits (-1: none; None: the prediction failed, said in `error`, and is not
    stored), the probes by candidate index, and how long it took."""

    search_hash: str
    largest_fit: int | None
    probes: dict[int, Probe] = field(default_factory=dict, metadata={"read": _probes})
    seconds: float | None = None
    recorded_at: str | None = None
    error: str | None = None

    def to_dict(self) -> dict:
        values = fields_of(self)
        values["probes"] = {str(i): fields_of(probe) for i, probe in self.probes.items()}
        return {"schema": SCHEMA_VERSION, **values}

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "PredictionRecord":
        return read_fields(cls, Table(values, where))


def write_prediction(path: Path, record: PredictionRecord) -> None:
    """The prediction child's answer, for the search that waits for it (atomically)."""
    write_atomic(path, json.dumps(record.to_dict()))


def read_prediction(path: Path) -> PredictionRecord:
    """The answer the prediction child wrote to `path`; a DamagedRecord if it cannot be read."""
    try:
        values = json.loads(Path(path).read_text())
    except json.JSONDecodeError as error:
        raise DamagedRecord(str(path), f"not valid JSON ({error.msg})") from None
    return PredictionRecord.from_dict(values, str(path))
