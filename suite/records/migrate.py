"""Schema 1 to schema 2. Schema 1 stayed the version while its writers kept adding fields, so a
version-1 file holds any of their forms; each step below says which writers lacked a field, and
gives it the value that means what the older record meant. A form that cannot be brought to
schema 2 is a DamagedRecord naming the field (loading skips it with a warning)."""

from suite.errors import RecordError
from suite.records.fields import DamagedRecord, Table, read_fields
from suite.records.search import Boundary
from suite.records.trial import SCHEMA_VERSION


def _version(values, where: str, kind: str) -> int:
    if not isinstance(values, dict):
        raise DamagedRecord(where, f"a {kind} must be a JSON object")
    # predictions carried no version before schema 2
    version = values.get("schema", 1 if kind == "PredictionRecord" else None)
    if version not in (1, SCHEMA_VERSION):
        raise RecordError(
            f"{where}: record schema version {version!r}; this suite reads versions 1 and "
            f"{SCHEMA_VERSION}. Re-run the trials with this suite (inv run --force) or read them "
            "with the suite version that wrote them."
        )
    return version


def upgrade(values, kind: str, where: str) -> dict:
    """`values` (a stored record of type `kind`: TrialRecord, SearchRecord, PredictionRecord) in
    schema 2."""
    if _version(values, where, kind) == SCHEMA_VERSION:
        return values
    return {"TrialRecord": trial_v1, "SearchRecord": search_v1, "PredictionRecord": prediction_v1}[
        kind
    ](dict(values))


def trial_v1(values: dict) -> dict:
    """Trial records: `log` since the first (0022d76), `image` since f124847, `run` since
    05d85a5; metrics gained lms (e593c12), lms_traffic (cb4b98d), replicas, nodes,
    images_per_sec_per_replica and workers (b6c4a5b), machine_speed, machine_load (473d9e3) and
    slurm_job, each absent (not measured) before, which schema 2 reads as None."""
    values["schema"] = SCHEMA_VERSION
    for key in ("log", "run", "image"):
        values.setdefault(key, None)
    return values


def search_v1(values: dict) -> dict:
    """Search records before 31c6d76 have no `boundary` and their trials no `repeat` (each ran
    once, repeat 0); a boundary without what its margin is shown from was "not measured", as
    it is now (None)."""
    values["schema"] = SCHEMA_VERSION
    trials = values.get("trials")
    if isinstance(trials, list):
        values["trials"] = [
            {"repeat": 0, **trial} if isinstance(trial, dict) else trial for trial in trials
        ]
    boundary = values.get("boundary")
    if boundary is not None:
        try:
            read_fields(Boundary, Table(boundary, "", "boundary"))
        except DamagedRecord:
            boundary = None
    values["boundary"] = boundary
    return values


def prediction_v1(values: dict) -> dict:
    """Predictions carried no schema version; their form has not changed since (26594da)."""
    values["schema"] = SCHEMA_VERSION
    return values


def projection_v1(values, where: str) -> dict:
    """projection.json: schema 1 was the bare list of projections; its links had no
    `out_bandwidth` before ae16893 (one bandwidth both ways, as the report read it)."""
    if isinstance(values, dict) and values.get("schema") == SCHEMA_VERSION:
        return values
    if not isinstance(values, list):
        version = values.get("schema") if isinstance(values, dict) else None
        raise RecordError(f"{where}: not a projection file this suite reads (schema {version!r})")
    for projection in values:
        for link in projection.get("links", []) if isinstance(projection, dict) else []:
            if isinstance(link, dict) and "bandwidth" in link:
                link.setdefault("out_bandwidth", link["bandwidth"])
    return {"schema": SCHEMA_VERSION, "projections": values}
