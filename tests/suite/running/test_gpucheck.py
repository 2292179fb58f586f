"""`inv gpucheck` (suite/running/gpucheck.py and its gpucheck_*.py siblings): the command that
accepts a GPU host. Here, without a GPU, it runs end to end in the two-device mode (real
processes, one per check); its judges are shown to fail on what a broken GPU path would give
them, and a failing check to fail the task."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from invoke import Context, Exit
from report_cases import HOST, record, write_record

import tasks
from lms.observe.placement import PlacementReport, SwapInCheck, SwapInTiming
from suite.records import gpucheck as gpucheck_records
from suite.records import load_host, store_host
from suite.records.hosts import GpuCheck
from suite.reporting.report import render_report
from suite.running import gpucheck
from suite.running.gpucheck_checks import CHECKS, EXPECT
from suite.running.gpucheck_judges import (
    copy_bytes_failures,
    memory_failures,
    pinned_failures,
    placement_failures,
    timing_failures,
)
from suite.running.gpucheck_outcome import check_text

ROOT = Path(__file__).resolve().parents[3]
SWAP_IN = "lms/s0/g0/lms_swapin"


@pytest.fixture(scope="module")
def checked(tmp_path_factory):
    """`inv gpucheck --mode two-device` as a user runs it, its state directory a temporary one
    (the summary host descriptions carry)."""
    base = tmp_path_factory.mktemp("gpucheck")
    results, state = base / "results", base / "state"
    completed = subprocess.run(
        [sys.executable, "-m", "invoke", "gpucheck", "--mode", "two-device"]
        + ["--results", str(results), "--host", "checked"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "XDG_STATE_HOME": str(state)},
    )
    return completed, results, state


@pytest.mark.slow
def test_inv_gpucheck_runs_every_check_and_says_what_did_not_run_without_a_gpu(checked):
    completed, _, _ = checked
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    out = completed.stdout
    assert out.startswith("GPU check of host checked, mode two-device (no GPU: ")
    for index, check in enumerate(CHECKS, 1):
        assert f"check {index} of 5 ({check.id}): {check.title} ..." in out
    assert out.count("(elapsed ") == 5 and ": 5 checks in 5 fresh processes" in out
    # a: every LMS op ran where placed, every swap-in gated by its trigger
    assert "LMS ops ran as placed" in out and " 0 Grappler swaps, 0 layout transposes" in out
    # b: the host-side sends after their triggers; the device timeline is GPU only
    assert "host-side sends started after the trigger ended" in out
    assert "not run: GPU only, no GPU here: the device timeline's host-to-device copy" in out
    # c: GPU only, said so with its reason
    assert "not run: GPU only, no GPU here: the two logical CPU devices share the CPU's" in out
    # d: both Grappler configurations and the real run
    assert "LMS's configuration: 0 of " in out and "TensorFlow's defaults: " in out
    assert "as it ran (/CPU:1, post-optimization graph): 0 of " in out
    # e: the split step's updates, the pieces' reads, the pinned cap
    assert (
        "6 Conv2D split in 4 pieces" in out and "18 of 18 piece reads gated" in out
    )  # first pieces wait for nothing
    assert "pinned host cap 1 MiB: HostMemoryError on the first call, 0 re-plans" in out
    assert "not run: GPU only, no GPU here: the bytes the pieces move" in out
    assert "FAILED" not in out
    assert "GPU check: passed 4/5, 1 GPU-only not run (two-device, " in out
    assert "GPU-only parts of checks b, c, d, e did not run (no GPU)" in out


@pytest.mark.slow
def test_its_record_holds_every_check_and_names_its_host_description(checked):
    _, results, _ = checked
    found = json.loads((results / "gpucheck" / "checked.json").read_text())
    assert (found["schema"], found["host"], found["mode"], found["ok"]) == (
        1,
        "checked",
        "two-device",
        True,
    )
    assert (found["passed"], found["failed"], found["not_run"], found["of"]) == (4, 0, 1, 5)
    statuses = {c["id"]: c["status"] for c in found["checks"]}
    assert statuses == {"a": "passed", "b": "passed", "c": "not run", "d": "passed", "e": "passed"}
    checks = {c["id"]: c for c in found["checks"]}
    placement = checks["a"]["data"]["placement"]
    assert placement["ok"] and placement["swap_ins"] and not placement["ungated"]
    timing = checks["b"]["data"]["timing"]
    assert timing["clock"] == "host" and all(
        s["start"] >= s["trigger_end"] for s in timing["swap_ins"]
    )
    assert checks["d"]["data"]["grappler"]["replay"]["lms"]["ok"]
    split = checks["e"]["data"]["split"]
    assert len(split["splits"]) == 6 and split["mismatched"] == []
    assert split["largest_relative"] <= EXPECT["update_rtol"]
    pinned = checks["e"]["data"]["pinned"]
    assert (
        pinned["raised"] == "HostMemoryError"
        and "TF_GPU_HOST_MEM_LIMIT_IN_MB" in (pinned["message"])
    )
    for name in ("a-placement", "b-timing", "d-grappler", "e-split", "e-pinned"):
        assert (results / "logs" / "checked" / f"gpucheck-{name}.log").exists()
    assert found["host_ref"] and (results / "hosts" / f"{found['host_ref']}.json").exists()


@pytest.mark.slow
def test_the_host_description_carries_the_check(checked):
    """The description `inv gpucheck` stored, and every one captured on this machine after it
    (from the state directory's summary), say how the check went."""
    _, results, state = checked
    found = json.loads((results / "gpucheck" / "checked.json").read_text())
    description = load_host(results, found["host_ref"])
    assert description.gpu_check == GpuCheck(
        found["checked_at"], "two-device", 4, 0, 1, 5, found["tensorflow_version"]
    )
    summary = json.loads(next((state / "lms-suite").glob("gpucheck-*.json")).read_text())
    assert summary == description.raw["gpu_check"]


def test_a_machine_without_a_check_has_no_summary_and_a_stale_form_is_ignored(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert gpucheck_records.host_check_summary() is None
    path = gpucheck_records.state_file()
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": 0, "passed": 5}))
    assert gpucheck_records.host_check_summary() is None
    path.write_text("{torn")
    assert gpucheck_records.host_check_summary() is None


def test_the_reports_hosts_table_shows_each_hosts_check(tmp_path):
    checked = copy.deepcopy(HOST)
    checked["gpu_check"] = {
        "version": 1,
        "checked_at": "2026-11-27T09:00:00+00:00",
        "mode": "gpu",
        "passed": 5,
        "failed": 0,
        "not_run": 0,
        "of": 5,
        "tensorflow_version": "2.20.0",
    }
    write_record(tmp_path, record("alpha", store_host(tmp_path, checked), "aaaa", 10.0, 0.1))
    write_record(tmp_path, record("beta", store_host(tmp_path, HOST), "aaaa", 11.0, 0.1))
    text = render_report(tmp_path, tmp_path / "out").read_text()
    row = next(line for line in text.splitlines() if "GPU check (`inv gpucheck`)" in line)
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells == [
        "**GPU check (`inv gpucheck`)** ⚠ differs",
        "passed 5/5 (2026-11-27), with TensorFlow 2.20.0",  # the trials ran 2.21.0
        "not run",
    ]


@pytest.mark.parametrize(
    "summary, text",
    [
        ({"mode": "gpu", "passed": 5, "failed": 0, "not_run": 0}, "passed 5/5 (2026-11-27)"),
        (
            {"mode": "two-device", "passed": 4, "failed": 0, "not_run": 1},
            "passed 4/5, 1 GPU-only not run (two-device, 2026-11-27)",
        ),
        (
            {"mode": "gpu", "passed": 3, "failed": 2, "not_run": 0},
            "FAILED 2 of 5 (gpu, 2026-11-27)",
        ),
    ],
)
def test_a_check_in_words(summary, text):
    assert check_text(GpuCheck("2026-11-27T09:00:00+00:00", of=5, **summary)) == text
    assert check_text(None) == "not run"


# --- a broken GPU path fails the checks, and the task ------------------------------------------


def report_with(swap_in: SwapInCheck, **more) -> PlacementReport:
    planned = {SWAP_IN: "/device:CPU:0", "lms/s0/lms_swapout": "/device:CPU:0"}
    return PlacementReport(
        planned=planned,
        ran={**planned, **more.pop("ran", {})},
        swap_ins=(swap_in,),
        piece_reads=more.pop("piece_reads", {}),
        **more,
    )


GATED = SwapInCheck(SWAP_IN, "/device:CPU:0", "conv2d_3/Relu", "conv2d_3/Relu", f"{SWAP_IN}/_9")


def test_check_a_passes_a_gated_swap_in_and_fails_an_ungated_one():
    assert placement_failures(report_with(GATED)) == []
    # the desk check's B1: the copy back waits for nothing (no control edge reaches it)
    ungated = SwapInCheck(SWAP_IN, "/device:CPU:0", "conv2d_3/Relu", None, f"{SWAP_IN}/_9")
    assert placement_failures(report_with(ungated)) == [
        f"swap-in {SWAP_IN} is not gated by its trigger conv2d_3/Relu: waits for nothing"
    ]
    # B2: Grappler removed the swap ops; M1, M2: its own swaps and layout transposes
    removed = SwapInCheck(SWAP_IN, None, "conv2d_3/Relu", None, None)
    failures = placement_failures(
        PlacementReport(
            {SWAP_IN: "/device:CPU:0"},
            {},
            (removed,),
            {"lms_split/x/strided_slice_1": False},
            ("swap_out_conv2d_1",),
            ("conv2d-0-TransposeNHWCToNCHW-LayoutOptimizer",),
        )
    )
    assert [f.split(" ")[0:3] for f in failures] == [
        ["1", "of", "1"],  # did not run
        ["swap-in", SWAP_IN, "is"],
        ["1", "of", "1"],  # piece reads
        ["Grappler's", "memory", "optimizer"],
        ["Grappler's", "layout", "optimizer"],
    ]


def test_check_b_fails_a_copy_that_starts_before_its_trigger_ended_or_is_not_seen():
    on_time = SwapInTiming(SWAP_IN, "conv2d_3/Relu", 1.0e-3, 1.2e-3)
    assert timing_failures([on_time], "device") == []
    early = SwapInTiming(SWAP_IN, "conv2d_3/Relu", 1.0e-3, 0.4e-3)
    unseen = SwapInTiming("lms/s1/g0/lms_swapin", "conv2d_4/Relu", 1.0e-3, None)
    assert timing_failures([early, unseen], "device") == [
        f"swap-in {SWAP_IN}: its copy started at 0.400 ms, before its trigger conv2d_3/Relu "
        "ended at 1.000 ms (device timeline)",
        "swap-in lms/s1/g0/lms_swapin: the device timeline has no event of its copy",
    ]
    assert timing_failures([], "host") == [
        "no swap-in was timed on the host timeline (the step swapped nothing?)"
    ]


def test_the_gpu_only_judges_fail_a_peak_that_did_not_drop_and_bytes_not_moved():
    row = {
        "precision": "fp32",
        "ordering": 0,
        "plain_peak": 1000 * 2**20,
        "simulated_without": 1000 * 2**20,
        "simulated_with": 400 * 2**20,
        "swapped_bytes": 700 * 2**20,
    }
    assert memory_failures([{**row, "lms_peak": 420 * 2**20}]) == []
    failures = memory_failures([{**row, "lms_peak": 990 * 2**20}])  # desk check B1
    assert [f.split(":")[0] for f in failures] == ["fp32 ordering 0"] * 2
    assert "expected at least 50% of the simulated drop 600.0 MiB" in failures[0]
    assert "+147.5% from the simulated 400.0 MiB; expected within 10%" in failures[1]
    assert copy_bytes_failures(100 * 2**20, 95 * 2**20) == []
    assert copy_bytes_failures(100 * 2**20, 0) == [
        "the copy events moved 0.0 MiB, the plan 100.0 MiB (0.00x; expected 0.5x to 1.25x)"
    ]


def test_check_e_fails_a_re_plan_or_another_error_on_a_small_pinned_cap():
    raised = {"raised": "HostMemoryError", "plans": 0}
    hint = "raise it with TF_GPU_HOST_MEM_LIMIT_IN_MB=<MB> before TensorFlow starts"
    assert pinned_failures({**raised, "message": hint}) == []
    assert pinned_failures({**raised, "message": hint, "plans": 3}) == [
        "LMS planned 3 times before giving up: a re-plan"
    ]
    assert pinned_failures({"raised": "ResourceExhaustedError", "message": "OOM"}) == [
        "with a pinned host cap of 1 MiB the split step raised ResourceExhaustedError instead of "
        "raising lms.HostMemoryError: OOM"
    ]


def fake_parts(placement: PlacementReport):
    """A runner that answers each part without a process: check a's answer judged from
    `placement`, every other part passed."""

    def run(check, part, mode, log_path):
        if part.name == "placement":
            failures = placement_failures(placement)
            return {"findings": [placement.summary()], "failures": failures, "data": {}}
        return {"findings": [f"{part.label} fine"], "failures": []}

    return run


def describe() -> dict:
    """A host description as describe_host() makes one, without its minute of measuring."""
    return {**copy.deepcopy(HOST), "gpu_check": gpucheck_records.host_check_summary()}


def test_a_failing_check_fails_the_task_with_a_line_per_failure(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ungated = SwapInCheck(SWAP_IN, "/device:CPU:0", "conv2d_3/Relu", None, f"{SWAP_IN}/_9")
    monkeypatch.setattr(gpucheck, "run_part", fake_parts(report_with(ungated)))
    monkeypatch.setattr("suite.hosts.description.capture_host_description", describe)
    with pytest.raises(Exit) as raised:
        tasks.gpucheck(Context(), mode="two-device", results=str(tmp_path), host="broken")
    assert raised.value.code == 1
    assert str(raised.value.message).splitlines() == [
        "FAILED check a (LMS ops survive Grappler and run where placed): swap-in "
        f"{SWAP_IN} is not gated by its trigger conv2d_3/Relu: waits for nothing"
    ]
    found = json.loads((tmp_path / "gpucheck" / "broken.json").read_text())
    assert (found["ok"], found["failed"], found["passed"]) == (False, 1, 3)
    assert load_host(tmp_path, found["host_ref"]).gpu_check.failed == 1


def test_the_same_task_passes_when_every_swap_in_is_gated(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr(gpucheck, "run_part", fake_parts(report_with(GATED)))
    monkeypatch.setattr("suite.hosts.description.capture_host_description", describe)
    tasks.gpucheck(Context(), mode="gpu", results=str(tmp_path), host="fine")
    out = capsys.readouterr().out
    assert "check 3 of 5 (c)" in out and "memory-fp16-ordering1 fine" in out
    assert out.count("memory-") == 4  # c: a process per precision and ordering on a GPU
    assert ": 5 checks in 9 fresh processes" in out
    assert "GPU check: passed 5/5 (" in out


def test_a_crashed_check_process_is_a_failure_and_no_gpu_for_mode_gpu_is_one_line(tmp_path):
    def crashed(check, part, mode, log_path):
        return {"error": "exit 1: Segmentation fault"} if check.id == "b" else {}

    run = gpucheck.run_gpucheck(tmp_path, "h", "two-device", echo=lambda line: None, runner=crashed)
    assert run.failures == [
        "check b (every copy back starts after its trigger): timing: the check's process "
        "failed: exit 1: Segmentation fault"
    ]
    from suite.errors import SuiteError

    with pytest.raises(SuiteError, match="TensorFlow sees no GPU"):
        gpucheck.run_gpucheck(
            tmp_path,
            "h",
            "gpu",
            echo=lambda line: None,
            runner=lambda *a: {"fatal": "--mode gpu: TensorFlow sees no GPU (...)"},
        )
    with pytest.raises(SuiteError, match="--mode 'cuda': one of gpu, two-device"):
        gpucheck.run_gpucheck(tmp_path, "h", "cuda")


def test_without_a_visible_gpu_the_default_mode_is_two_device(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # as tests/conftest.py hides GPUs
    assert gpucheck.default_mode() == "two-device"


def gpu_run(copy_start: float):
    """GPU only, made by hand: the run metadata of one swap-in's send/recv pair (named as the
    partitioner names them, lms/observe/copy_match.py) and a device plane as cupti_collector writes
    one (tests/support/gpu_plane.py): the trigger's kernel from 0 to 1 ms, the swap-in's
    host-to-device copy from `copy_start`."""
    from gpu_plane import add_gpu_plane
    from tensorflow.core.protobuf import config_pb2

    from lms import _tf_private

    metadata = config_pb2.RunMetadata()
    function_graph = metadata.function_graphs.add()
    cpu, gpu = (f"/job:localhost/replica:0/task:0/device:{d}:0" for d in ("CPU", "GPU"))
    host, device = function_graph.partition_graphs.add(), function_graph.partition_graphs.add()
    host.node.add(name=SWAP_IN, op="Identity", device=cpu)
    for partition, name, op in ((host, "_9", "_Send"), (device, "_10", "_Recv")):
        node = partition.node.add(name=f"{SWAP_IN}/{name}", op=op, device=cpu)
        node.input.extend([SWAP_IN] if op == "_Send" else [])
        node.attr["tensor_name"].s = f"edge_9_{SWAP_IN}".encode()
        node.attr["send_device"].s, node.attr["recv_device"].s = cpu.encode(), gpu.encode()
    space = add_gpu_plane(
        _tf_private.xplane_pb2().XSpace(),
        [
            ("volta_scudnn_128x64_relu", None, 1e-3, "conv2d_3/Relu:Relu", 0.0),
            ("MemcpyH2D", 2**20, 1e-4, f"{SWAP_IN}/_10:_Recv", copy_start),
        ],
    )
    return metadata, space


def test_gpu_only_a_copy_event_is_timed_against_its_triggers_kernel():
    from lms.observe.copy_match import copy_names
    from lms.observe.placement import copy_timing

    def device_copy_timing(report, metadata, space):
        return copy_timing(report, copy_names(metadata), space)

    report = report_with(GATED)
    (on_time,) = device_copy_timing(report, *gpu_run(copy_start=2e-3))
    assert on_time == SwapInTiming(SWAP_IN, "conv2d_3/Relu", 1e-3, 2e-3)
    assert timing_failures([on_time], "device") == []
    (early,) = device_copy_timing(report, *gpu_run(copy_start=0.5e-3))  # desk check B1
    assert early.start == pytest.approx(0.5e-3) and not early.after_trigger
    assert len(timing_failures([early], "device")) == 1
