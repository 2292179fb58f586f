"""The results directory's paths, the checks of the directories the tasks are given, and the
atomic replacement of a whole file:

    <results>/<host>.jsonl              trial records, one JSON object per line
    <results>/searches/<host>.jsonl     limit-search records
    <results>/predictions/<host>.jsonl  the simulator's predicted limits (a cache of searches)
    <results>/hosts/<ref>.json          host descriptions, stored once under their content hash
    <results>/logs/<host>/<name>.log    each trial's and prediction's output
    <output>/projection.json            `inv project`'s projections, beside the report

The directories the tasks are given (`--results`, `--output`, ...) are checked here before any
work, so that a run does not end after minutes in a traceback about a file it cannot write.
"""

import os
import re
import tempfile
from datetime import UTC, datetime
from pathlib import Path

from suite.errors import RecordError

PROJECTION_FILE = "projection.json"
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


def projection_file(output_dir: Path) -> Path:
    return Path(output_dir) / PROJECTION_FILE


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
        raise RecordError(
            f"{option} {path}: cannot write there ({error.strerror}); give a directory you can "
            "write to"
        ) from None
    return path


def existing_writable_directory(path, option: str) -> Path:
    """`path` (absolute) as an existing directory this process can write files in, never made:
    a place the user chose for something outside the results (`--host-disk`, the disk LMS keeps
    host arrays on); one RecordError naming `option` and the path otherwise."""
    path = Path(path).expanduser().absolute()
    if not path.exists():
        raise RecordError(f"{option} {path}: no such directory; give an existing directory")
    if not path.is_dir():
        raise RecordError(f"{option} {path}: a file, not a directory; give a directory")
    return writable_directory(path, option)


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
