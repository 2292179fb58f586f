import json

import pytest
from record_cases import PARAMS, RATE, trial_values
from report_cases import MIB, RELU_GRAD, lms_report, traffic

import lms
from suite.records import (
    DamagedRecord,
    MachineLoad,
    Metrics,
    Rate,
    Spread,
    TrialRecord,
    TrialResult,
    WorkerSummary,
    read_result,
    write_result,
)

PLAN = lms.PlanReport.from_dict({"budget_bytes": 100, "fits": True, "timings_s": {"trace": 1.0}})


def test_a_record_reads_typed_and_writes_back_what_it_read():
    values = trial_values(
        metrics={
            "images_per_sec": RATE,
            "pixels_per_sec": RATE,
            "lms": PLAN.to_dict(),  # lms's report, read as lms.PlanReport
            "machine_load": {
                "cores": 2,
                "other_cores": {"mean": 0.5, "max": 1.0},
                "load_average_1m": {"before": 1.0, "after": None},
            },
            "workers": [
                {
                    "outcome": "ok",
                    "error": None,
                    "step_time_s": 0.1,
                    "peak_memory_bytes": 5,
                    "final_loss": 2.0,
                }
            ],
        }
    )
    record = TrialRecord.from_dict(values, "test")
    assert record.params == PARAMS and record.params.hash == record.spec_hash
    assert record.metrics.images_per_sec == Rate(1.0, 0.1, 0.05, 1.0)
    assert record.metrics.rate("pixels_per_sec") == record.metrics.images_per_sec
    assert record.metrics.lms_plan == PLAN
    assert record.metrics.machine_load.other_cores == Spread(0.5, 1.0)
    assert record.metrics.workers == (WorkerSummary("ok", None, 0.1, 5, 2.0),)
    assert record.metrics.voxels_per_sec is None and record.spec.search is None
    assert json.loads(json.dumps(record.to_dict())) == {
        **values,
        "spec": {"name": "t", "study": "a", "source": "t.toml"},
    }


def test_an_lms_report_lms_cannot_read_is_a_damaged_record_naming_the_field():
    values = trial_values(metrics={"images_per_sec": RATE, "lms_traffic": {"steps": 2}})
    with pytest.raises(DamagedRecord, match=r"'metrics.lms_traffic' is not lms's SwapTraffic"):
        TrialRecord.from_dict(values, "test")


def _with(table: dict, path: str, value) -> dict:
    """`table` (JSON) with the value at the dotted `path` replaced."""
    table = json.loads(json.dumps(table))
    *parents, last = path.split(".")
    part = table
    for name in parents:
        part = part[int(name)] if name.isdigit() else part[name]
    part[int(last) if last.isdigit() else last] = value
    return table


FULL_PLAN = {
    **lms_report(60 * MIB, 6 * MIB, RELU_GRAD, 74 * MIB),
    "timeline": {"device_bytes_without_lms": [1, 2], "device_bytes_with_lms": [1, 1]},
}


@pytest.mark.parametrize(
    ("key", "table", "path", "value"),
    [
        ("lms", FULL_PLAN, "budget_bytes", "300MiB"),
        ("lms", FULL_PLAN, "fits", 1),
        ("lms", FULL_PLAN, "analysis.variable_bytes", 1.5),
        ("lms", FULL_PLAN, "analysis.largest_op.name", None),
        ("lms", FULL_PLAN, "timeline.device_bytes_without_lms.1", "2"),
        ("lms_traffic", traffic("emulated link", 0.1, 0.2), "swap_outs_per_step", None),
        ("lms_traffic", traffic("emulated link", 0.1, 0.2), "in_bandwidth", "fast"),
        ("lms_disk", {"directory": "/d", "peak_bytes": 5}, "peak_bytes", 5.5),
    ],
)
def test_an_lms_report_of_other_types_than_lms_declares_is_a_damaged_record(
    key, table, path, value
):
    """lms's from_dict takes a table's values as they are: the record's reader checks them
    against lms's annotations (suite/records/fields.py check_loaded), so that the report reads
    lms's fields as their types say."""
    good = trial_values(metrics={"images_per_sec": RATE, key: table})
    assert TrialRecord.from_dict(good, "test").metrics is not None
    bad = trial_values(metrics={"images_per_sec": RATE, key: _with(table, path, value)})
    with pytest.raises(DamagedRecord, match=rf"'metrics.{key}.{path}' = .* is invalid"):
        TrialRecord.from_dict(bad, "test")


def test_a_plan_report_reads_what_an_older_lms_did_not_write_as_none():
    """PlanReport reads a key an older record lacks as None, whatever its annotation says (its
    docstring): the check lets those through, and the report shows "—" for them."""
    record = TrialRecord.from_dict(
        trial_values(metrics={"images_per_sec": RATE, "lms": {"budget_bytes": 5}}), "test"
    )
    plan = record.metrics.lms_plan
    assert plan.budget_bytes == 5 and plan.peak_bytes_with_lms is None and plan.analysis is None


def test_metrics_store_only_what_was_measured():
    metrics = Metrics(memory_budget_bytes=5, machine_load=MachineLoad(2, Spread(0.1, 0.2)))
    assert metrics.to_dict() == {
        "memory_budget_bytes": 5,
        "machine_load": {"cores": 2, "other_cores": {"mean": 0.1, "max": 0.2}},
    }
    with pytest.raises(KeyError, match="'peak_memory_bytes' is not a rate"):
        metrics.rate("peak_memory_bytes")


def test_a_trial_process_result_round_trips_and_an_unreadable_one_is_a_crash(tmp_path):
    path = tmp_path / "result.json"
    assert read_result(path) is None  # the process wrote none
    result = TrialResult("out_of_memory", Metrics(peak_memory_bytes=9), "too big", "CPU:0", 3.0)
    write_result(path, result)
    assert json.loads(path.read_text())["outcome"] == "out_of_memory"  # wall_s is the parent's
    assert read_result(path) == TrialResult(
        "out_of_memory", Metrics(peak_memory_bytes=9), "too big", "CPU:0"
    )
    path.write_text(json.dumps({"outcome": "ok", "device": None, "metrics": None, "error": None}))
    crashed = read_result(path)
    assert crashed.outcome == "crashed" and "must carry metrics" in crashed.error
    with pytest.raises(DamagedRecord, match="outcome 'fine'"):
        TrialResult("fine")


def test_a_workers_placement_is_written_only_when_known_and_reads_back():
    from suite.records import Placement

    placed = WorkerSummary("ok", placement=Placement("vm", "node2", 1, "127.0.0.1:20385"))
    metrics = Metrics(images_per_sec=Rate(1.0, 0.1), workers=(placed, WorkerSummary("ok")))
    table = json.loads(json.dumps(metrics.to_dict()))
    assert table["workers"][0]["placement"] == {
        "hostname": "vm",
        "node": "node2",
        "node_id": 1,
        "address": "127.0.0.1:20385",
    }
    assert "placement" not in table["workers"][1]
    values = trial_values(metrics=table)
    assert TrialRecord.from_dict(values, "test").metrics.workers == (placed, WorkerSummary("ok"))


def test_the_disk_a_trial_was_lent_reads_back_and_a_record_without_one_writes_as_before():
    """`metrics.lms_disk` (lms.DiskUsage, `inv run --host-disk`): written only with a disk, so
    records without one, older ones included, load and write back unchanged."""
    usage = lms.DiskUsage("/scratch/lms", 3 * 2**30, 0.3e9, None)
    metrics = Metrics(images_per_sec=Rate(1.0, 0.1), lms_disk=usage)
    table = json.loads(json.dumps(metrics.to_dict()))
    assert table["lms_disk"] == {
        "directory": "/scratch/lms",
        "peak_bytes": 3 * 2**30,
        "write_bandwidth": 0.3e9,
        "read_bandwidth": None,
    }
    assert TrialRecord.from_dict(trial_values(metrics=table), "test").metrics.lms_disk == usage
    old = trial_values()
    record = TrialRecord.from_dict(old, "test")
    assert record.metrics.lms_disk is None and "lms_disk" not in record.to_dict()["metrics"]
    assert json.loads(json.dumps(record.to_dict())) == old
