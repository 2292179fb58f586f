"""The results directory, and the only module that reads or writes it:

    <results>/<host>.jsonl              trial records, one JSON object per line
    <results>/searches/<host>.jsonl     limit-search records
    <results>/predictions/<host>.jsonl  the simulator's predicted limits (a cache of searches)
    <results>/hosts/<ref>.json          host descriptions, stored once under their content hash
    <results>/logs/<host>/<name>.log    each trial's and prediction's output

Appends are a single `os.write` of one line to a file opened with O_APPEND, then fsync: a run
killed at any moment leaves every earlier record intact and at worst one torn last line, which
loading skips (with a warning) and the next append seals off with a newline. A record whose
fields have the wrong types (edited by hand, written by a broken tool) is skipped the same way,
with a warning naming file:line and the field: the report reads what stands. Writing refuses it.

The directories the tasks are given (`--results`, `--output`, ...) are checked here before any
work, so that a run does not end after minutes in a traceback about a file it cannot write.
"""

import hashlib
import json
import logging
import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from suite.errors import RecordError
from suite.specs.model import TrialParams

SCHEMA_VERSION = 1
# how a trial ended: it trained, ran out of (emulated) device memory, died, or did not finish
# skipped: the host lacks what the trial needs (e.g. 4 GPUs), said in the record's error
OUTCOMES = ("ok", "out_of_memory", "crashed", "timed_out", "skipped")
log = logging.getLogger("suite.records")

# field -> type(s) every record must carry (validated on write and on load)
REQUIRED = {
    "schema": int,
    "spec": dict,
    "spec_hash": str,
    "params": dict,
    "repeat": int,
    "host": str,
    "host_ref": str,
    "outcome": str,
    "metrics": (dict, type(None)),
    "error": (str, type(None)),
    "device": (str, type(None)),
    "started_at": str,
    "finished_at": str,
    "wall_s": (int, float),
}
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def check_host_name(name: str) -> str:
    if not _HOST_NAME.match(name):
        raise RecordError(f"host name {name!r} is invalid: use letters, digits, '.', '_' and '-'")
    return name


def results_file(results_dir: Path, host: str) -> Path:
    return Path(results_dir) / f"{check_host_name(host)}.jsonl"


def searches_file(results_dir: Path, host: str) -> Path:
    return Path(results_dir) / "searches" / f"{check_host_name(host)}.jsonl"


def predictions_file(results_dir: Path, host: str) -> Path:
    return Path(results_dir) / "predictions" / f"{check_host_name(host)}.jsonl"


def log_file(results_dir: Path, host: str, name: str) -> Path:
    """Where the output of a trial (`name` = spec hash-repeat) or a prediction is kept."""
    return Path(results_dir) / "logs" / check_host_name(host) / f"{name}.log"


def writable_directory(path: Path, option: str) -> Path:
    """`path` as a directory this process can write files in, made if missing; a RecordError
    naming `option` otherwise. Tried with a real file: permissions, a read-only or immutable
    directory and a file in the way all show."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RecordError(f"{option} {path}: a file, not a directory; give a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        raise RecordError(f"{option} {path}: cannot write there ({error.strerror}); give a "
                          "directory you can write to") from None  # fmt: skip
    return path


def writable_file(path: Path, option: str) -> Path:
    """`path` as a file this process can write (replace atomically); RecordError naming
    `option` otherwise."""
    path = Path(path)
    if path.is_dir():
        raise RecordError(f"{option} {path}: a directory, not a file; give a file name")
    writable_directory(path.parent, option)
    return path


def readable_directory(path: Path, option: str) -> Path:
    """`path` unless it names something that is not a directory (RecordError naming `option`);
    whether a missing one is an error is the reader's to say."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise RecordError(f"{option} {path}: a file, not a directory; give a directory")
    return path


def shared_folders(host: str) -> tuple[str, ...]:
    """Folders copied as they are when a host's results are merged into another directory."""
    return ("hosts", f"logs/{check_host_name(host)}")


def write_atomic(path: Path, text: str) -> None:
    """Replace `path` with `text` so that a reader (or a crash) sees the old file or the new one,
    never a part: written beside it, flushed to disk, then renamed over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


class DamagedRecord(RecordError):
    """One record is not a readable trial record (a field missing or of the wrong type): loading
    skips it with a warning naming file:line, as it skips a torn line; writing refuses it."""

    def __init__(self, where: str, problem: str):
        self.where, self.problem = where, problem
        super().__init__(f"{where}: {problem}")


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _integer(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _rate(value) -> bool:
    """A rate summary (suite.stats.summarize_rates): numbers, mean and stderr at least."""
    return (
        isinstance(value, dict)
        and {"mean", "stderr"} <= set(value)
        and all(_number(v) for k, v in value.items() if k in ("mean", "stderr", "jitter", "total"))
    )


_RATE = (_rate, "a table {mean, stderr, jitter, total} of numbers")
# metrics the reports and the regression gate read -> (check, what is allowed), when present
METRIC_TYPES = {
    "images_per_sec": _RATE,
    "images_per_sec_per_replica": _RATE,
    "pixels_per_sec": _RATE,
    "voxels_per_sec": _RATE,
    "machine_speed": (lambda v: isinstance(v, dict) and _number(v.get("mean")),
                      "a table with a number 'mean'"),
    "step_time_s": (lambda v: isinstance(v, dict) and all(map(_number, v.values())),
                    "a table of numbers"),
    "peak_memory_bytes": (lambda v: v is None or _integer(v), "an integer or null"),
    "memory_budget_bytes": (lambda v: v is None or _integer(v), "an integer or null"),
    "replicas": (_integer, "an integer"),
    "nodes": (_integer, "an integer"),
    "lms": (lambda v: v is None or isinstance(v, dict), "a table or null"),
    "lms_traffic": (lambda v: v is None or isinstance(v, dict), "a table or null"),
    "workers": (lambda v: isinstance(v, list), "a list"),
    "machine_load": (lambda v: v is None or (isinstance(v, dict) and _integer(v.get("cores"))
                                              and isinstance(v.get("other_cores"), dict)
                                              and _number(v["other_cores"].get("mean"))),
                     "a table with an integer 'cores' and 'other_cores' {mean, max}, or null"),
}  # fmt: skip
# trial parameters the reports read -> (check, what is allowed)
PARAM_TYPES = {
    "workload": (lambda v: isinstance(v, str), "a string"),
    "resolution": (_integer, "an integer"),
    "batch": (_integer, "an integer"),
    "precision": (lambda v: isinstance(v, str), "a string"),
    "gpus": (_integer, "an integer"),
    "nodes": (_integer, "an integer"),
    "lms": (lambda v: v is None or isinstance(v, dict), "a table or null"),
}


def _short(value) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_table(where: str, name: str, table: dict, checks: dict) -> None:
    for field, (check, allowed) in checks.items():
        if field in table and not check(table[field]):
            raise DamagedRecord(where, f"field '{name}.{field}' = {_short(table[field])} is "
                                f"invalid; allowed: {allowed}")  # fmt: skip


def validate_record(record: dict, where: str) -> dict:
    """The record if it is a schema-1 trial record. Another schema version is a RecordError (the
    whole file is another suite's); a damaged record (a field missing or of the wrong type, in
    the record, its metrics or its parameters) a DamagedRecord, both naming `where`."""
    if not isinstance(record, dict):
        raise DamagedRecord(where, "a record must be a JSON object")
    version = record.get("schema")
    if version != SCHEMA_VERSION:
        raise RecordError(
            f"{where}: record schema version {version!r}; this suite reads version "
            f"{SCHEMA_VERSION}. Re-run the trials with this suite (inv run --force) "
            "or read them with the suite version that wrote them."
        )
    for name, kind in REQUIRED.items():
        if name not in record:
            raise DamagedRecord(where, f"record lacks required field {name!r}")
        if not isinstance(record[name], kind) or isinstance(record[name], bool):
            allowed = " or ".join(
                k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,))
            )
            raise DamagedRecord(where, f"field {name!r} has type {type(record[name]).__name__}; "
                                f"allowed: {allowed.replace('NoneType', 'null')}")  # fmt: skip
    if record["outcome"] not in OUTCOMES:
        raise DamagedRecord(where, f"outcome {record['outcome']!r} is not one of {OUTCOMES}")
    if record["outcome"] == "ok" and not record["metrics"]:
        raise DamagedRecord(where, "an 'ok' record must carry metrics")
    if record["outcome"] == "ok" and "images_per_sec" not in record["metrics"]:
        raise DamagedRecord(where, "an 'ok' record's metrics must hold 'images_per_sec'")
    _check_table(where, "metrics", record["metrics"] or {}, METRIC_TYPES)
    _check_table(where, "params", record["params"], PARAM_TYPES)
    return record


# a search record's boundary verdicts (suite/running/boundary.py decides them)
BOUNDARY_VERDICTS = ("clear", "confirmed", "uncertain")
SEARCH_REQUIRED = {
    "schema": int,
    "search_hash": str,
    "limit_key": str,
    "kind": str,
    "mode": str,
    "params": dict,
    "host": str,
    "trials": list,
}


def validate_search_record(record: dict, where: str) -> dict:
    if not isinstance(record, dict) or record.get("schema") != SCHEMA_VERSION:
        raise RecordError(f"{where}: not a schema-{SCHEMA_VERSION} search record")
    for name, kind in SEARCH_REQUIRED.items():
        if not isinstance(record.get(name), kind):
            raise DamagedRecord(where, f"search record lacks field {name!r} ({kind.__name__})")
    boundary = record.get("boundary")
    if boundary is not None and (
        not isinstance(boundary, dict) or boundary.get("verdict") not in BOUNDARY_VERDICTS
    ):
        raise DamagedRecord(
            where,
            f"search record's field 'boundary' is invalid; allowed: a table whose verdict is one "
            f"of {', '.join(BOUNDARY_VERDICTS)}",
        )
    return record


def validate_prediction(record: dict, where: str) -> dict:
    if not isinstance(record, dict) or not isinstance(record.get("search_hash"), str):
        raise RecordError(f"{where}: not a prediction record")
    return record


def record_params(record: dict) -> TrialParams:
    """A trial's or search's record's parameters, typed; RecordError if they are not a trial's."""
    try:
        return TrialParams.from_dict(record["params"])
    except (TypeError, ValueError) as error:
        where = f"record {record.get('spec_hash') or record.get('search_hash')}"
        raise RecordError(f"{where} of host {record.get('host')}: {error}") from None


def append_record(path: Path, record: dict, validate=None) -> None:
    """Append one validated record as one line, atomically with respect to crashes."""
    (validate or validate_record)(record, str(path))
    line = (json.dumps(record, sort_keys=True) + "\n").encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        if os.fstat(fd).st_size and not _ends_with_newline(path):
            line = b"\n" + line  # seal off a torn line left by a killed writer
        written = os.write(fd, line)
        if written != len(line):
            raise OSError(f"short write to {path}: {written} of {len(line)} bytes")
        os.fsync(fd)
    finally:
        os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as handle:
        handle.seek(-1, os.SEEK_END)
        return handle.read(1) == b"\n"


def load_records(path: Path, validate=None) -> list[dict]:
    """All records of a results file, validated; a torn line from a killed run and a damaged
    record are skipped with a warning naming file:line."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    lines = path.read_bytes().split(b"\n")
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as error:
            # a torn write is an unterminated line: the last one, or one sealed off by an append
            log.warning("%s:%d: skipping an incomplete record (%s)", path, number, error.msg)
            continue
        try:
            records.append((validate or validate_record)(record, f"{path}:{number}"))
        except DamagedRecord as error:
            log.warning("%s: skipping a damaged record: %s", error.where, error.problem)
    return records


def load_all_records(results_dir: Path) -> list[dict]:
    """Records of every host's results file in `results_dir`."""
    records = []
    for path in sorted(Path(results_dir).glob("*.jsonl")):
        records.extend(load_records(path))
    return records


def load_search_records(results_dir: Path) -> list[dict]:
    """Search records of every host in `results_dir`."""
    records = []
    for path in sorted((Path(results_dir) / "searches").glob("*.jsonl")):
        records.extend(load_records(path, validate_search_record))
    return records


def load_predictions(results_dir: Path, host: str) -> list[dict]:
    return load_records(predictions_file(results_dir, host), validate_prediction)


def load_searches(results_dir: Path, host: str) -> list[dict]:
    return load_records(searches_file(results_dir, host), validate_search_record)


def host_ref(description: dict) -> str:
    """Content hash of a description: records refer to it, identical hosts share it."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def store_host(results_dir: Path, description: dict) -> str:
    """Write a host description once under its content hash; return the hash."""
    _check_host_description(description, "host description")
    ref = host_ref(description)
    path = Path(results_dir) / "hosts" / f"{ref}.json"
    if not path.exists():
        write_atomic(path, json.dumps(description, indent=1, sort_keys=True))
    return ref


def load_host(results_dir: Path, ref: str) -> dict | None:
    """The description stored under `ref`, checked against its hash; None if there is none."""
    path = Path(results_dir) / "hosts" / f"{ref}.json"
    if not path.exists():
        return None
    try:
        description = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise RecordError(f"{path}: not valid JSON ({error.msg})") from None
    _check_host_description(description, str(path))
    if host_ref(description) != ref:
        raise RecordError(
            f"{path}: its content does not match its hash {ref} (edited or corrupted); "
            "restore it, or delete it and re-run a trial on that host to describe it again"
        )
    return description


def _check_host_description(description, where: str) -> None:
    if not isinstance(description, dict):
        raise RecordError(f"{where}: a host description must be a JSON object")
    if not isinstance(description.get("architecture"), str):
        raise RecordError(f"{where}: field 'architecture' must be a string")
