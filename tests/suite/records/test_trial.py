import json

import pytest
from record_cases import PARAMS, RATE, trial_values

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
