"""lms/values/report.py: the plan's report and the swap traffic as frozen types; `to_dict` is the
JSON a
record holds (unchanged), `from_dict` reads back every form stored records hold."""

import copy
import json

import pytest
from lms_cases import Case, small_cnn

import lms

# A record of a GoogLeNet trial before timelines, the explained peak's parts and the floor op
# (an 18-key plan, as the suite's v1 test fixtures hold), and the version 1 traffic beside it
# (no version, no copy: its seconds timed the swap ops' bookkeeping).
OLD_PLAN = {
    "analysis": {"edges": 4677, "input_bytes": 4194304, "kernels": "onednn",
                 "largest_op": {"bytes": 52428800, "name": "googlenet_1/conv3_1/Relu"},
                 "learning_parameter_bytes": 29360128, "levels": 161, "unknown_size_tensors": 0,
                 "variable_bytes": 62914560, "vertices": 2559},
    "budget_bytes": 314572800, "fits": True, "host_peak_bytes": 314572800, "lms_needed": True,
    "parameters": {"serialization": [], "serialization_by_size": 0.0, "swapin_ahead": 1,
                   "swapin_groupby": 0, "swapout_threshold": 1, "sync_mode": 0},
    "peak": {"buffers": [], "step": 0, "steps": 0},
    "peak_bytes_with_lms": 313524224, "peak_bytes_without_lms": 629145600,
    "peak_op_with_lms": "googlenet_1/conv3_1/Relu",
    "peak_op_without_lms": "googlenet_1/conv2_1/Relu",
    "planned_budget_bytes": 314572800, "simulations": 9, "swap_ins": 52, "swapped_bytes": 314572800,
    "swapped_in_bytes": 314572800, "swapped_tensors": 40,
    "timings_s": {"analysis": 1.0, "rewrite": 0.5, "tuning": 2.0},
}  # fmt: skip
OLD_TRAFFIC = {
    "in_bandwidth": 85e9, "in_bytes_per_step": 198180864, "in_seconds_per_step": 0.00233,
    "link": None, "out_bandwidth": 54e9, "out_bytes_per_step": 137363456,
    "out_seconds_per_step": 0.00254, "source": "host-store", "steps": 5,
    "swap_ins_per_step": 194, "swap_outs_per_step": 143,
}  # fmt: skip


@pytest.fixture(scope="module")
def planned():
    """A real plan's report and traffic, made by LMS on a small CNN (the emulated device)."""
    case = Case(*small_cnn(resolution=32, batch=2))
    planner = lms.LMS(
        device_memory="1GiB",
        swapout_threshold=1,
        swapin_ahead=1,
        swapin_groupby=0,
        calibration_steps=0,
        link={"bandwidth": "50GB/s"},
    )
    step = planner.wrap(case.step)
    for _ in range(2):
        step(case.images, case.labels)
    return planner.report, step.traffic()


def test_a_fresh_report_and_traffic_round_trip_to_the_same_json(planned):
    report, traffic = planned
    assert isinstance(report, lms.PlanReport) and isinstance(traffic, lms.SwapTraffic)
    data = json.loads(json.dumps(report.to_dict()))  # as a record stores it
    assert list(data) == [
        "budget_bytes",
        "planned_budget_bytes",
        "fits",
        "lms_needed",
        "parameters",
        "peak_bytes_without_lms",
        "peak_op_without_lms",
        "peak_bytes_with_lms",
        "peak_op_with_lms",
        "host_peak_bytes",
        "swapped_tensors",
        "swap_ins",
        "swapped_bytes",
        "swapped_in_bytes",
        "simulations",
        "peak",
        "analysis",
        "timings_s",
        "timeline",
    ]
    assert lms.PlanReport.from_dict(data) == report
    assert lms.PlanReport.from_dict(data).to_dict() == data
    assert list(data["analysis"])[-3:] == ["kernels", "loops", "floor_op"]
    assert report.swapped_tensors > 0 and report.timeline.device_bytes_with_lms
    moved = json.loads(json.dumps(traffic.to_dict()))
    assert moved["version"] == 2 and moved["copy"] == "emulated link"
    assert lms.SwapTraffic.from_dict(moved) == traffic
    assert moved["in_bandwidth"] == pytest.approx(
        moved["in_bytes_per_step"] / moved["in_seconds_per_step"]
    )


def test_the_closed_loops_attempts_are_kept_only_when_it_ran(planned):
    report, _ = planned
    assert "calibration" not in report.to_dict()  # calibration_steps=0: as before the types
    measured = report.with_calibration({"accepted": True, "attempts": []})
    assert measured.to_dict()["calibration"] == {"accepted": True, "attempts": []}
    assert lms.PlanReport.from_dict(measured.to_dict()) == measured


@pytest.mark.parametrize(
    "dropped",
    [
        (),
        ("timeline",),  # before timelines
        ("timeline", "peak"),  # before the peak was explained
        ("timeline", "peak", "planned_budget_bytes", "fits"),  # before the closed loop
    ],
)
def test_older_reports_load_with_none_for_what_they_lack(dropped):
    old = copy.deepcopy(OLD_PLAN)
    for key in dropped:
        old.pop(key, None)
    report = lms.PlanReport.from_dict(old)
    assert report.swapped_tensors == 40 and report.analysis.vertices == 2559
    assert report.analysis.floor_op is None and report.analysis.loops is None
    assert report.timeline is None and report.calibration is None
    for key in dropped:
        assert getattr(report, key) is None
    again = report.to_dict()  # today's form: the keys it lacked are there, as None
    assert {k: again[k] for k in old if k != "analysis"} == {
        k: v for k, v in old.items() if k != "analysis"
    }
    assert all(again[k] is None for k in again if k not in old)


def test_a_hand_written_report_of_two_keys_loads():
    """The suite's report tests write only what a plot reads (budget and timeline)."""
    timeline = {
        "device_bytes_without_lms": [1, 3],
        "device_bytes_with_lms": [1, 2],
        "host_bytes": [0, 1],
    }
    report = lms.PlanReport.from_dict({"budget_bytes": 2**30, "timeline": timeline})
    assert report.timeline.device_bytes_with_lms == (1, 2) and report.swapped_tensors is None
    assert report.to_dict()["timeline"] == timeline


def test_version_1_traffic_loads_as_version_1_without_a_copy_kind():
    traffic = lms.SwapTraffic.from_dict(OLD_TRAFFIC)
    assert traffic.version == 1 and traffic.copy is None and traffic.in_bandwidth == 85e9
    assert lms.SwapTraffic.from_dict(traffic.to_dict()) == traffic


def test_a_disk_usage_round_trips_and_reads_without_a_speed():
    """`LMS.disk_usage()`'s type: its JSON names each field; a disk the store never measured
    (nothing spilled by plan) has no speed."""
    usage = lms.DiskUsage("/scratch/lms", 3 * 2**30, 0.3e9, 1.2e9)
    data = json.loads(json.dumps(usage.to_dict()))
    assert data == {
        "directory": "/scratch/lms",
        "peak_bytes": 3 * 2**30,
        "write_bandwidth": 0.3e9,
        "read_bandwidth": 1.2e9,
    }
    assert lms.DiskUsage.from_dict(data) == usage
    unmeasured = lms.DiskUsage.from_dict({"directory": "/d", "peak_bytes": 0})
    assert unmeasured.write_bandwidth is None and unmeasured.read_bandwidth is None


def test_a_projection_round_trips():
    projection = lms.Projection(1.5, 1.0, 0.25, 0.5, 3)
    assert projection.to_dict() == {
        "step_seconds": 1.5,
        "compute_seconds": 1.0,
        "busy_out": 0.25,
        "busy_in": 0.5,
        "waits": 3,
    }
    assert lms.Projection.from_dict(projection.to_dict()) == projection


def test_the_report_types_are_frozen(planned):
    report, traffic = planned
    with pytest.raises(AttributeError):
        report.swapped_tensors = 0
    with pytest.raises(AttributeError):
        traffic.steps = 0
