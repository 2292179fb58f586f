"""Record files of one JSON object per line: appended atomically, loaded typed.

Appends are a single `os.write` of one line to a file opened with O_APPEND, then fsync: a run
killed at any moment leaves every earlier record intact and at worst one torn last line, which
loading skips (with a warning) and the next append seals off with a newline. Loading migrates a
schema-1 line (suite.records.migrate) and reads it as its type; a line that cannot be read
(fields of the wrong type, edited by hand, written by a broken tool) is skipped the same way,
with one warning naming file:line, the field and what to run: the report reads what stands.
Writing refuses a record that would not load back."""

import json
import logging
import os
from pathlib import Path

from suite.records.fields import DamagedRecord
from suite.records.migrate import upgrade
from suite.records.search import PredictionRecord, SearchRecord
from suite.records.trial import TrialRecord

log = logging.getLogger("suite.records")
Record = TrialRecord | SearchRecord | PredictionRecord
# what brings a skipped record back
AGAIN = {
    TrialRecord: "`inv run` of its spec runs the trial again",
    SearchRecord: "`inv search` of its spec runs the search again",
    PredictionRecord: "the next search predicts it again",
}


def append(path: Path, record: Record) -> None:
    """Append one record as one line, atomically with respect to crashes; refused (a
    DamagedRecord) if it would not load back as it is."""
    values = record.to_dict()
    type(record).from_dict(values, str(path))
    line = (json.dumps(values, sort_keys=True) + "\n").encode()
    path = Path(path)
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


def load(path: Path, kind: type[Record]) -> list:
    """Every record of `kind` in the file `path` (none if it does not exist), migrated from
    schema 1 and validated; torn and damaged lines skipped with a warning naming file:line. A
    record of a newer schema is a RecordError: the file is another suite version's."""
    path = Path(path)
    if not path.exists():
        return []
    records = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        if not raw.strip():
            continue
        where = f"{path}:{number}"
        try:
            values = json.loads(raw)
        except json.JSONDecodeError as error:
            # a torn write is an unterminated line: the last one, or one sealed off by an append
            log.warning("%s: skipping an incomplete record (%s)", where, error.msg)
            continue
        try:
            records.append(kind.from_dict(upgrade(values, kind.__name__, where), where))
        except DamagedRecord as error:
            log.warning(
                "%s: skipping a damaged record: %s; %s", error.where, error.problem, AGAIN[kind]
            )
    return records
