"""Schema 1 to schema 2. Schema 1 stayed the version while its writers kept adding fields, so a
version-1 file holds any of their forms; each step below says which writers lacked a field, and
gives it the value that means what the older record meant. A form that cannot be brought to
schema 2 is a DamagedRecord naming the field (loading skips it with a warning)."""

from suite.errors import RecordError
from suite.records.fields import DamagedRecord
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
    values["schema"] = SCHEMA_VERSION
    for key in ("log", "run", "image"):  # the first records had no run, image or log
        values.setdefault(key, None)
    return values


def search_v1(values: dict) -> dict:
    values["schema"] = SCHEMA_VERSION
    return values


def prediction_v1(values: dict) -> dict:
    values["schema"] = SCHEMA_VERSION
    return values


def projection_v1(values, where: str):
    """projection.json: schema 1 was the bare list of projections."""
    if isinstance(values, list):
        return {"schema": SCHEMA_VERSION, "projections": values}
    if isinstance(values, dict) and values.get("schema") == SCHEMA_VERSION:
        return values
    version = values.get("schema") if isinstance(values, dict) else None
    raise RecordError(f"{where}: not a projection file this suite reads (schema {version!r})")
