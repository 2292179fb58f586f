"""The projection record: `inv project`'s projected images/sec of a spec's LMS trials on named
CPU-GPU links (`<output>/projection.json`, beside the report). Schema 2 is a table
{"schema": 2, "projections": [...]}; schema 1 was the bare list."""

import json
import logging
from dataclasses import dataclass
from pathlib import Path

from suite.errors import RecordError
from suite.records.fields import DamagedRecord, Table, fields_of, read_fields
from suite.records.files import projection_file, write_atomic
from suite.records.migrate import projection_v1
from suite.records.trial import SCHEMA_VERSION

log = logging.getLogger("suite.records")


@dataclass(frozen=True)
class LinkProjection:
    """One link's projection of a trial's step (lms.project)."""

    link: str
    description: str
    bandwidth: float  # host to device, bytes/s
    out_bandwidth: float  # device to host
    latency: float
    step_seconds: float
    images_per_sec: float
    busy_out_s: float
    busy_in_s: float


@dataclass(frozen=True)
class Projection:
    """One trial's projection: its size, where the compute times came from (`gpu`: "host" for
    measured here, else a roofline GPU), the compute-bound rate, the bytes swapped per step, and
    a row per link."""

    spec: str
    study: str
    spec_hash: str
    workload: str
    resolution: int
    batch: int
    precision: str
    gpu: str
    compute_seconds: float
    images_per_sec_without_link_waits: float
    out_bytes_per_step: int
    in_bytes_per_step: int
    swaps: int
    links: tuple[LinkProjection, ...]

    def to_dict(self) -> dict:
        return fields_of(self)


def write_projections(output_dir: Path, projections: list[Projection]) -> Path:
    """Replace `<output_dir>/projection.json` with `projections` (refused if they would not
    load back)."""
    values = {"schema": SCHEMA_VERSION, "projections": [p.to_dict() for p in projections]}
    path = projection_file(output_dir)
    _read(values, str(path))
    write_atomic(path, json.dumps(values, indent=1) + "\n")
    return path


def _read(values, where: str) -> list[Projection]:
    return [read_fields(Projection, p) for p in Table(values, where).tables("projections")]


def load_projections(output_dir: Path) -> list[Projection] | None:
    """The projections beside a report; None when there are none, or (with a warning saying
    what to run) when the file cannot be read."""
    path = projection_file(output_dir)
    if not path.exists():
        return None
    try:
        return _read(projection_v1(json.loads(path.read_text()), str(path)), str(path))
    except json.JSONDecodeError as error:
        problem = f"not valid JSON ({error.msg})"
    except (DamagedRecord, RecordError) as error:
        problem = getattr(error, "problem", None) or str(error).removeprefix(f"{path}: ")
    log.warning("%s: skipping the projections: %s; run `inv project` again", path, problem)
    return None
