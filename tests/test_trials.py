"""Real trials in real processes: records, out-of-memory, crash, time-out, resume, real data."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from suite.lms_seam import check_lms_table
from suite.records import load_records, results_file
from suite.running.runner import run_spec
from suite.running.trial import run_trial
from suite.specs import parse_spec
from suite.workloads.data import write_tfrecords

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

TINY = """
name = "tiny"
[defaults]
steps = 3
warmup_steps = 1
timeout = 300
{defaults}
[[study]]
name = "g"
kind = "sweep"
workload = "googlenet"
batch = 1
resolutions = {resolutions}
"""


def tiny_spec(resolutions="[32]", defaults=""):
    return parse_spec(TINY.format(resolutions=resolutions, defaults=defaults), "tiny.toml")


@pytest.mark.compat  # the trial process on the ppc64le stack's TensorFlow (2.14.1, Keras 2) too
def test_smoke_sized_trial_end_to_end_makes_a_valid_record(tmp_path):
    lines = []
    summary = run_spec(tiny_spec(), tmp_path, host="h1", echo=lines.append)
    (record,) = load_records(results_file(tmp_path, "h1"))
    assert summary.outcomes == {"ok": 1}
    import tensorflow as tf

    gpu = bool(tf.config.list_physical_devices("GPU"))  # a CPU machine, or a GPU host
    assert record["outcome"] == "ok" and record["device"] == ("GPU:0" if gpu else "CPU:0")
    metrics = record["metrics"]
    assert len(metrics["step_times_s"]) == 3 and len(metrics["warmup_times_s"]) == 1
    rate = metrics["images_per_sec"]
    assert rate["mean"] > 0 and rate["stderr"] >= 0 and rate["jitter"] >= 0
    assert metrics["pixels_per_sec"]["mean"] == pytest.approx(rate["mean"] * 32 * 32)
    assert metrics["peak_memory_bytes"] > 7_000_000 * 4  # at least the fp32 weights
    load = metrics["machine_load"]  # what other processes took of the cores meanwhile
    assert load["cores"] >= 1 and 0 <= load["other_cores"]["mean"] <= load["other_cores"]["max"]
    assert load["busy_cores"]["mean"] > 0 and load["seconds"] > 0  # the steps themselves
    assert (tmp_path / "hosts" / f"{record['host_ref']}.json").exists()
    assert any("[trial 1/1] googlenet 32px" in line for line in lines)
    # a second run finds it recorded and runs nothing
    again = run_spec(tiny_spec(), tmp_path, host="h1", echo=lines.append)
    assert again.skipped == 1 and not again.outcomes


@pytest.mark.parametrize("precision, compute", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_mixed_precision_trials_compute_in_their_precision(tmp_path, precision, compute):
    spec = tiny_spec(defaults=f'precision = "{precision}"')
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    (record,) = load_records(results_file(tmp_path, "h1"))
    assert record["outcome"] == "ok", record["error"]
    assert record["params"]["precision"] == precision
    assert f"(computes in {compute}, variables float32)" in Path(record["log"]).read_text()
    assert record["spec_hash"] != tiny_spec().trials[0].hash


def test_force_runs_recorded_trials_again_as_a_new_run(tmp_path):
    first = run_spec(tiny_spec(), tmp_path, host="h1", echo=lambda _: None)
    again = run_spec(tiny_spec(), tmp_path, host="h1", force=True, echo=lambda _: None)
    assert first.outcomes == again.outcomes == {"ok": 1} and again.skipped == 0
    records = load_records(results_file(tmp_path, "h1"))
    assert len(records) == 2 and records[0]["spec_hash"] == records[1]["spec_hash"]
    assert records[0]["run"] != records[1]["run"]


def test_peak_above_the_memory_budget_is_out_of_memory(tmp_path):
    spec = tiny_spec(defaults='memory_budget = "8MiB"')
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    (record,) = load_records(results_file(tmp_path, "h1"))
    assert record["outcome"] == "out_of_memory"
    assert record["metrics"]["peak_memory_bytes"] > 8 * 2**20
    assert "exceeds the memory budget" in record["error"]


def _fault_env(tmp_path, code):
    """A sitecustomize that runs `code` at interpreter start: a real fault in the trial process."""
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(tmp_path / "fault")}


def test_a_crashing_trial_is_recorded_as_crashed_with_its_log_tail(tmp_path):
    env = _fault_env(
        tmp_path,
        "import os, signal, sys\n"
        "print('\\n'.join(f'line {i}' for i in range(200)), file=sys.stderr, flush=True)\n"
        "print('fault injected: segfault next', file=sys.stderr, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    result = run_trial(tiny_spec().trials[0].params, 120, tmp_path / "t.log", env)
    assert result.outcome == "crashed"
    assert "killed by SIGSEGV" in result.error
    tail = result.error.split("log tail:\n", 1)[1]
    assert tail.rstrip().endswith("fault injected: segfault next")  # the last lines, in order
    assert "line 199" in tail and "line 0\n" not in tail  # a tail, not the whole log


def test_a_hanging_trial_is_timed_out_and_killed(tmp_path):
    env = _fault_env(tmp_path, "import time\ntime.sleep(3600)\n")
    result = run_trial(tiny_spec().trials[0].params, 2, tmp_path / "t.log", env)
    assert result.outcome == "timed_out"


def test_a_failing_workload_is_crashed_and_the_run_goes_on(tmp_path):
    bad = tmp_path / "missing"
    spec = parse_spec(
        TINY.format(
            resolutions="[32, 64]", defaults=f'data = {{format = "imagenet", path = "{bad}"}}'
        ),
        "t.toml",
    )
    summary = run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    assert summary.outcomes == {"crashed": 2}
    records = load_records(results_file(tmp_path, "h1"))
    assert all("no TFRecord files" in r["error"] for r in records)


def test_real_tfrecords_classification_and_segmentation(tmp_path):
    write_tfrecords(str(tmp_path / "train-0.tfrecord"), "imagenet", 4, size=40, classes=1001)
    write_tfrecords(str(tmp_path / "voc-0.tfrecord"), "voc", 3, size=50, classes=21)
    text = f"""
name = "real"
[defaults]
steps = 2
warmup_steps = 1
[[study]]
name = "g"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 2
data = {{format = "imagenet", path = "{tmp_path}/train-*.tfrecord"}}
[[study]]
name = "d"
kind = "throughput"
workload = "deeplabv3plus"
resolution = 64
batch = 1
data = {{format = "voc", path = "{tmp_path}/voc-0.tfrecord"}}
"""
    summary = run_spec(parse_spec(text, "real.toml"), tmp_path / "r", "h1", echo=lambda _: None)
    assert summary.outcomes == {"ok": 2}


def test_resume_after_sigkill_loses_at_most_the_trial_in_flight(tmp_path):
    spec_file = tmp_path / "three.toml"
    spec_file.write_text(TINY.format(resolutions="[32, 64, 96]", defaults=""))
    results = tmp_path / "results"
    command = [
        sys.executable,
        "-m",
        "invoke",
        "run",
        "--spec",
        str(spec_file),
        "--results",
        str(results),
        "--host",
        "h1",
    ]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    path = results / "h1.jsonl"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not (path.exists() and load_records(path)):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the runner and the trial in flight
    process.wait()
    first = load_records(path)
    assert 1 <= len(first) < 3
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    assert f"{len(first)} already recorded" in completed.stdout
    records = load_records(path)
    assert len(records) == 3
    assert len({r["spec_hash"] for r in records}) == 3
    assert records[: len(first)] == first
    assert {r["run"] for r in records} == {first[0]["run"]}  # the resumed run is the same run


def test_lms_trains_within_a_budget_the_plain_step_exceeds(tmp_path):
    """The emulated device for real: same budget, LMS off is out of memory, LMS on trains (over
    an emulated 2 GB/s link); the record holds the plan and the swap traffic it measured."""
    spec = parse_spec(TINY.format(resolutions="[224]", defaults=""), "t.toml")
    params = spec.trials[0].params.replace(batch=8, steps=2)
    plain = run_trial(params, 600, tmp_path / "plain.log")
    assert plain.outcome == "ok", plain.error
    budget = int(plain.metrics["peak_memory_bytes"] * 0.85)
    with_budget = params.replace(memory_budget_bytes=budget)
    off = run_trial(with_budget, 600, tmp_path / "off.log")
    on_params = (
        parse_spec(
            TINY.format(
                resolutions="[224]",
                defaults=f'lms = {{link = {{bandwidth = "2GB/s"}}}}\nmemory_budget = {budget}',
            ),
            "t",
        )
        .trials[0]
        .params
    )
    on = run_trial(on_params.replace(batch=8, steps=2), 600, tmp_path / "on.log")
    assert off.outcome == "out_of_memory"
    assert on.outcome == "ok", on.error
    plan = on.metrics["lms"]
    assert plan["swapped_bytes"] > 0 and plan["peak_bytes_with_lms"] <= budget
    assert plan["parameters"]["swapout_threshold"] >= 1  # auto-tuned
    assert on.metrics["peak_memory_bytes"] <= budget < plain.metrics["peak_memory_bytes"]
    # the closed loop accepted the plan it kept, however few steps the trial asked for (its
    # steps run as warm-up until then: 1 unmeasured + 3 measured for a plan that holds), and
    # the trial's peak is that plan's
    calibration = plan["calibration"]
    kept = calibration["attempts"][-1]
    assert calibration["accepted"] and kept["outcome"] in ("fits", "kept") and kept["steps"] >= 3
    assert kept["measured_peak_bytes"] <= budget
    assert calibration["limit_bytes"] == plan["budget_bytes"]
    traffic = on.metrics["lms_traffic"]  # per measured step, counted in the host store
    assert traffic["source"] == "host-store" and traffic["steps"] == 2
    assert traffic["out_bytes_per_step"] == plan["swapped_bytes"]
    assert traffic["in_bytes_per_step"] == plan["swapped_in_bytes"]
    # the link's time (it wakes up by time.sleep's lateness, ~0.1 ms, early per transfer)
    assert traffic["in_seconds_per_step"] >= 0.95 * plan["swapped_in_bytes"] / 2e9
    assert traffic["link"] == {"bandwidth": 2e9, "latency": 0.0}
    assert traffic["version"] == 2 and traffic["copy"] == "emulated link"


def test_repeats_run_in_rounds_so_compared_trials_share_the_machine_load(tmp_path):
    """Round r runs every trial's r-th process: LMS off and on (or two sizes) are interleaved,
    not all repeats of one and then all of the other."""
    spec = tiny_spec("[32, 48]", "repeats = 2")
    lines = []
    run_spec(spec, tmp_path, host="h", echo=lines.append)
    order = [
        (r["params"]["resolution"], r["repeat"]) for r in load_records(results_file(tmp_path, "h"))
    ]
    assert order == [(32, 0), (48, 0), (32, 1), (48, 1)]
    assert [line.split("]")[0] for line in lines if line.startswith("[trial")] == [
        "[trial 1/4", "[trial 2/4", "[trial 3/4", "[trial 4/4"]  # fmt: skip


def test_two_replicas_train_like_one_on_the_same_global_batch_with_lms_per_worker(tmp_path):
    """Two worker processes over 127.0.0.1 (MultiWorkerMirroredStrategy, one thread each) and
    one process, same global batch of 4: the same losses step after step (GoogLeNet has no
    batch normalization, whose statistics would be per replica). With LMS, each worker plans and
    swaps for its own device and still trains the same."""
    # warm-up long enough for LMS's closed loop to accept its plan (1 unmeasured + 3 measured
    # steps): past the warm-up its steps would be added, and the losses compared after more
    # updates than the plain runs made
    base = tiny_spec("[64]").trials[0].params.replace(steps=3, warmup_steps=5)
    one = run_trial(base.replace(batch=4), 600, tmp_path / "one.log")
    # on a machine without GPUs, replicas are CPU workers of the emulated device (a budget each)
    two = run_trial(base.replace(batch=2, gpus=2, memory_budget_bytes=2**30), 600,
                    tmp_path / "two.log")  # fmt: skip
    everything = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}
    with_lms = base.replace(batch=2, gpus=2, lms=check_lms_table(everything),
                            memory_budget_bytes=2**30)  # fmt: skip
    swapped = run_trial(with_lms, 600, tmp_path / "lms.log")
    for result in (one, two, swapped):
        assert result.outcome == "ok", result.error
    assert one.metrics["replicas"] == 1 and two.metrics["replicas"] == 2
    # the global batch's rate, and each replica's half of it
    rate, per_replica = two.metrics["images_per_sec"], two.metrics["images_per_sec_per_replica"]
    assert rate["mean"] == pytest.approx(2 * per_replica["mean"])
    workers = two.metrics["workers"]
    assert [w["outcome"] for w in workers] == ["ok", "ok"]
    assert workers[0]["final_loss"] == pytest.approx(workers[1]["final_loss"], rel=1e-6)
    assert two.metrics["final_loss"] == pytest.approx(one.metrics["final_loss"], rel=1e-4)
    assert swapped.metrics["final_loss"] == pytest.approx(one.metrics["final_loss"], rel=1e-4)
    assert swapped.metrics["lms"]["swapped_bytes"] > 0
    assert swapped.metrics["lms_traffic"]["out_bytes_per_step"] > 0
    # a GPU-sized trial (no memory budget) for 2 GPUs, on a host with fewer: skipped, saying why
    import tensorflow as tf

    if len(tf.config.list_physical_devices("GPU")) < 2:
        skipped = run_trial(base.replace(gpus=2), 600, tmp_path / "skipped.log")
        assert skipped.outcome == "skipped" and "needs 2 GPUs per node" in skipped.error


@pytest.mark.parametrize("setting", [None, "0"])
def test_trial_processes_train_with_one_kernel_set_whatever_the_cpu(monkeypatch, setting):
    """On x86_64 a trial process computes with oneDNN's kernels whether or not this CPU has
    AVX-512 (TensorFlow's own choice differs between two x86 hosts, and with it every peak); a
    TF_ENABLE_ONEDNN_OPTS the user set wins. The host description says which set trained."""
    import platform

    from suite.environment import child_environment

    if setting is None:
        monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    else:
        monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", setting)
    probe = "from suite.hosts.description import _cpu_kernels; print(_cpu_kernels())"
    completed = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                               env=child_environment(), timeout=300)  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    kernels = completed.stdout.split()[-1]
    if setting == "0":
        assert kernels == "Eigen"
    else:  # aarch64 keeps TensorFlow's choice (oneDNN's on Neoverse CPUs only)
        x86 = platform.machine() in ("x86_64", "AMD64")
        assert kernels == "oneDNN" if x86 else kernels in ("oneDNN", "Eigen")


def test_inv_plan_shows_what_the_loop_measured_for_a_recorded_trial(tmp_path):
    """`inv plan` beside a results directory: a trial that ran with LMS shows its closed loop's
    attempts (budget planned for, simulated and measured peak) as `measured`, next to the plan
    simulated now; a trial that never ran shows none."""
    from suite.running.planning import plan_spec

    plain = run_trial(tiny_spec("[128]").trials[0].params, 600, tmp_path / "plain.log")
    assert plain.outcome == "ok", plain.error
    budget = int(plain.metrics["peak_memory_bytes"] * 0.85)
    defaults = f"memory_budget = {budget}\nlms = true"
    results = tmp_path / "results"
    run_spec(tiny_spec("[128]", defaults), results, host="h", echo=lambda line: None)
    (record,) = load_records(results_file(results, "h"))
    assert record["outcome"] == "ok", record.get("error")
    calibration = record["metrics"]["lms"]["calibration"]
    assert calibration["attempts"][-1]["measured_peak_bytes"] > 0
    both = tiny_spec("[128, 112]", defaults)
    reports = {r["resolution"]: r for r in plan_spec(both, tmp_path / "p", results_dir=results)}
    assert reports[128]["measured"] == calibration
    assert "measured" not in reports[112]
