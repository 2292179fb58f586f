"""The results directory, and the only package that reads or writes it. Every record is a frozen
dataclass built in one place and read in one place; the report reads attributes.

Types (schema 2; a schema-1 file of any form the suite wrote is migrated on load, migrate.py):
    TrialRecord     <results>/<host>.jsonl: spec (SpecRef), spec_hash, params (TrialParams),
                    repeat, host, host_ref, outcome (OUTCOMES), metrics (Metrics | None), error,
                    device, started_at, finished_at, wall_s, log, run, image
    Metrics         images_per_sec, images_per_sec_per_replica, pixels_per_sec, voxels_per_sec
                    (Rate: mean, stderr, jitter, total; .rate(key)), step_time_s (StepTimes),
                    step_times_s, warmup_times_s, build_s, final_loss, peak_memory_bytes,
                    memory_budget_bytes, machine_load (MachineLoad), machine_speed
                    (MachineSpeed), replicas, nodes, workers (WorkerSummary..., each with its
                    placement), lms_plan, lms_traffic and lms_disk (lms.PlanReport,
                    lms.SwapTraffic, lms.DiskUsage), slurm_job, placement (Placement:
                    hostname, node, node_id, address);
                    None: not measured
    TrialResult     what a trial process writes: outcome, metrics, error, device (+ wall_s);
                    write_result(path, result), read_result(path)
    SearchRecord    <results>/searches/<host>.jsonl: kind, search_hash, limit_key, mode, spec,
                    params, lms, searched, range, largest_ok, smallest_failed, failed_outcome,
                    stop_reached, trials (SearchTrial...), trials_run, boundary (Boundary:
                    limit/failed BoundarySide with ProcessMargin processes, verdict ...),
                    prediction (SearchPrediction), host, host_ref, started_at, finished_at
    PredictionRecord <results>/predictions/<host>.jsonl: search_hash, largest_fit, probes
                    ({index: Probe}), seconds, recorded_at, error; the child's answer:
                    write_prediction(path, record), read_prediction(path)
    Projection      <output>/projection.json: a trial's projection, links (LinkProjection...)
    HostDescription <results>/hosts/<ref>.json (content-hashed, unversioned): architecture, cpu
                    (Cpu), memory_bytes, gpus (Gpu...), emulation, link, versions, suite, raw

Reading: load_trials(results, host=None), load_searches(results, host=None),
load_predictions(results, host), load_projections(output), load_host(results, ref). A record
that loads can be rendered: loading checks every field the report reads, and skips a record it
cannot migrate or validate with one warning naming file:line, the field and what to run.
Writing: append_trial(results, record), append_search(results, record), append_prediction(
results, host, record) (one atomic O_APPEND line, refused if it would not load back),
write_projections(output, projections), store_host(results, description). Any record file:
load(path, kind), append(path, record) (merging a container's results).

Modules: files (paths, directory checks, atomic replacement), fields (the typed field reader
every type's `from_dict` uses), lines (atomic appends, loading), trial, metrics, search,
projection, hosts (the types), migrate (schema 1 to 2).
"""

from pathlib import Path

from suite.records.fields import DamagedRecord
from suite.records.files import (
    PROJECTION_FILE,
    check_host_name,
    existing_writable_directory,
    log_file,
    predictions_file,
    projection_file,
    readable_directory,
    results_file,
    searches_file,
    shared_folders,
    utc_now,
    writable_directory,
    writable_file,
    write_atomic,
)
from suite.records.hosts import (
    Cpu,
    Gpu,
    HostDescription,
    SuiteVersion,
    host_ref,
    load_host,
    store_host,
)
from suite.records.lines import append, load
from suite.records.metrics import (
    OUTCOMES,
    MachineLoad,
    MachineSpeed,
    Metrics,
    Placement,
    Rate,
    Spread,
    StepTimes,
    WorkerSummary,
)
from suite.records.projection import (
    LinkProjection,
    Projection,
    load_projections,
    write_projections,
)
from suite.records.search import (
    BOUNDARY_VERDICTS,
    Boundary,
    BoundarySide,
    PredictionRecord,
    Probe,
    ProcessMargin,
    SearchPrediction,
    SearchRecord,
    SearchTrial,
    read_prediction,
    write_prediction,
)
from suite.records.trial import (
    SCHEMA_VERSION,
    SpecRef,
    TrialRecord,
    TrialResult,
    read_result,
    write_result,
)


def load_trials(results_dir: Path, host: str | None = None) -> list[TrialRecord]:
    """Trial records of `host`, or of every host in `results_dir`, in the order written."""
    if host is not None:
        return load(results_file(results_dir, host), TrialRecord)
    return [r for p in sorted(Path(results_dir).glob("*.jsonl")) for r in load(p, TrialRecord)]


def load_searches(results_dir: Path, host: str | None = None) -> list[SearchRecord]:
    """Search records of `host`, or of every host in `results_dir`."""
    if host is not None:
        return load(searches_file(results_dir, host), SearchRecord)
    paths = sorted((Path(results_dir) / "searches").glob("*.jsonl"))
    return [r for p in paths for r in load(p, SearchRecord)]


def load_predictions(results_dir: Path, host: str) -> list[PredictionRecord]:
    return load(predictions_file(results_dir, host), PredictionRecord)


def append_trial(results_dir: Path, record: TrialRecord) -> None:
    append(results_file(results_dir, record.host), record)


def append_search(results_dir: Path, record: SearchRecord) -> None:
    append(searches_file(results_dir, record.host), record)


def append_prediction(results_dir: Path, host: str, record: PredictionRecord) -> None:
    append(predictions_file(results_dir, host), record)


__all__ = [
    "BOUNDARY_VERDICTS",
    "OUTCOMES",
    "PROJECTION_FILE",
    "SCHEMA_VERSION",
    "Boundary",
    "BoundarySide",
    "Cpu",
    "DamagedRecord",
    "Gpu",
    "HostDescription",
    "LinkProjection",
    "MachineLoad",
    "MachineSpeed",
    "Placement",
    "Metrics",
    "PredictionRecord",
    "Probe",
    "ProcessMargin",
    "Projection",
    "Rate",
    "SearchPrediction",
    "SearchRecord",
    "SearchTrial",
    "SpecRef",
    "Spread",
    "StepTimes",
    "SuiteVersion",
    "TrialRecord",
    "TrialResult",
    "WorkerSummary",
    "append",
    "append_prediction",
    "append_search",
    "append_trial",
    "check_host_name",
    "existing_writable_directory",
    "host_ref",
    "load",
    "load_host",
    "load_predictions",
    "load_projections",
    "load_searches",
    "load_trials",
    "log_file",
    "predictions_file",
    "projection_file",
    "read_prediction",
    "read_result",
    "readable_directory",
    "results_file",
    "searches_file",
    "shared_folders",
    "store_host",
    "utc_now",
    "writable_directory",
    "writable_file",
    "write_atomic",
    "write_prediction",
    "write_projections",
    "write_result",
]
