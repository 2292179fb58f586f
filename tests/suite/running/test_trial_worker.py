"""Trial processes for real (suite.running.trial_worker): the record a trial leaves, in each
precision, over its memory budget, with LMS on the emulated device, and as data-parallel
replicas."""

import subprocess
import sys
from pathlib import Path

import pytest
from report_cases import HOST
from trial_cases import TINY, tiny_spec

from suite.lms_seam import check_lms_table
from suite.records import load_host, load_trials
from suite.reporting.limits_table import failure_cause
from suite.running.runner import run_spec
from suite.running.trial import run_trial
from suite.specs import parse_spec

pytestmark = pytest.mark.slow


@pytest.mark.compat  # the trial process on the ppc64le stack's TensorFlow (2.14.1, Keras 2) too
def test_smoke_sized_trial_end_to_end_makes_a_valid_record(tmp_path):
    lines = []
    summary = run_spec(tiny_spec(), tmp_path, host="h1", echo=lines.append)
    (record,) = load_trials(tmp_path, "h1")
    assert summary.outcomes == {"ok": 1}
    import tensorflow as tf

    gpu = bool(tf.config.list_physical_devices("GPU"))  # a CPU machine, or a GPU host
    assert record.outcome == "ok" and record.device == ("GPU:0" if gpu else "CPU:0")
    metrics = record.metrics
    assert len(metrics.step_times_s) == 3 and len(metrics.warmup_times_s) == 1
    rate = metrics.images_per_sec
    assert rate.mean > 0 and rate.stderr >= 0 and rate.jitter >= 0
    assert metrics.pixels_per_sec.mean == pytest.approx(rate.mean * 32 * 32)
    assert metrics.peak_memory_bytes > 7_000_000 * 4  # at least the fp32 weights
    load = metrics.machine_load  # what other processes took of the cores meanwhile
    assert load.cores >= 1 and 0 <= load.other_cores.mean <= load.other_cores.max
    assert load.busy_cores.mean > 0 and load.seconds > 0  # the steps themselves
    assert load_host(tmp_path, record.host_ref).architecture
    assert any("[trial 1/1] googlenet 32px" in line for line in lines)
    # a second run finds it recorded and runs nothing
    again = run_spec(tiny_spec(), tmp_path, host="h1", echo=lines.append)
    assert again.skipped == 1 and not again.outcomes


@pytest.mark.parametrize("precision, compute", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_mixed_precision_trials_compute_in_their_precision(tmp_path, precision, compute):
    spec = tiny_spec(defaults=f'precision = "{precision}"')
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    (record,) = load_trials(tmp_path, "h1")
    assert record.outcome == "ok", record.error
    assert record.params.precision == precision
    assert f"(computes in {compute}, variables float32)" in Path(record.log).read_text()
    assert record.spec_hash != tiny_spec().trials[0].hash


def test_peak_above_the_memory_budget_is_out_of_memory(tmp_path):
    spec = tiny_spec(defaults='memory_budget = "8MiB"')
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    (record,) = load_trials(tmp_path, "h1")
    assert record.outcome == "out_of_memory"
    assert record.metrics.peak_memory_bytes > 8 * 2**20
    assert "exceeds the memory budget" in record.error


def test_lms_trains_within_a_budget_the_plain_step_exceeds(tmp_path):
    """The emulated device for real: same budget, LMS off is out of memory, LMS on trains (over
    an emulated 2 GB/s link); the record holds the plan and the swap traffic it measured."""
    spec = parse_spec(TINY.format(resolutions="[224]", defaults=""), "t.toml")
    params = spec.trials[0].params.replace(batch=8, steps=2)
    plain = run_trial(params, 600, tmp_path / "plain.log")
    assert plain.outcome == "ok", plain.error
    budget = int(plain.metrics.peak_memory_bytes * 0.85)
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
    plan = on.metrics.lms_plan
    assert plan.swapped_bytes > 0 and plan.peak_bytes_with_lms <= budget
    assert plan.parameters["swapout_threshold"] >= 1  # auto-tuned
    assert on.metrics.peak_memory_bytes <= budget < plain.metrics.peak_memory_bytes
    # the closed loop accepted the plan it kept, however few steps the trial asked for (its
    # steps run as warm-up until then: 1 unmeasured + 3 measured for a plan that holds), and
    # the trial's peak is that plan's
    calibration = plan.calibration
    kept = calibration["attempts"][-1]
    assert calibration["accepted"] and kept["outcome"] in ("fits", "kept") and kept["steps"] >= 3
    assert kept["measured_peak_bytes"] <= budget
    assert calibration["limit_bytes"] == plan.budget_bytes
    traffic = on.metrics.lms_traffic  # per measured step, counted in the host store
    assert traffic.source == "host-store" and traffic.steps == 2
    assert traffic.out_bytes_per_step == plan.swapped_bytes
    assert traffic.in_bytes_per_step == plan.swapped_in_bytes
    # the link's time (it wakes up by time.sleep's lateness, ~0.1 ms, early per transfer)
    assert traffic.in_seconds_per_step >= 0.95 * plan.swapped_in_bytes / 2e9
    assert traffic.link == {"bandwidth": 2e9, "latency": 0.0}
    assert traffic.version == 2 and traffic.copy == "emulated link"


def test_a_disk_lent_to_lms_takes_what_the_host_memory_cannot_and_the_record_says_so(
    tmp_path, monkeypatch
):
    """`inv run --host-disk` natively: the trial's LMS keeps on the disk the host arrays beyond
    the RAM its spec's host memory leaves the host store, and the record says what the disk held
    and how fast it was; the trial's hash is the one it has without a disk. The host memory is
    set so that the store's share of it (DISK_RAM_SHARE of what it leaves beside the device,
    with the process's overhead: lms/device/host_memory.py) holds about half the plan's host
    arrays: the plan of the same trial without a disk, whose record has no disk, says how much
    that is. (The host is described by a fixed table: describing this one takes 10 s and is not
    what is tested.)"""
    monkeypatch.setattr("suite.running.executor.capture_host_description", lambda: HOST)
    everything = "swapout_threshold = 1, swapin_ahead = 1, swapin_groupby = 0"

    def spec(more: str = ""):
        return tiny_spec(defaults=f'memory_budget = "1GiB"\nlms = {{ {everything}{more} }}')

    results, disk = tmp_path / "results", tmp_path / "disk"
    disk.mkdir()
    run_spec(spec(), results, host="h1", echo=lambda _: None)
    (plain,) = load_trials(results, "h1")
    assert plain.outcome == "ok", plain.error
    assert plain.metrics.lms_disk is None and "lms_disk" not in plain.to_dict()["metrics"]
    plan = plain.metrics.lms_plan
    assert plan.host_peak_bytes > 0
    host_memory = int(1.3 * (plan.peak_bytes_with_lms + plan.host_peak_bytes)) + 1
    with_disk = spec(f", host_memory = {host_memory}")
    run_spec(with_disk, results, host="h1", echo=lambda _: None, host_disk=disk)
    record = load_trials(results, "h1")[-1]
    assert record.outcome == "ok", record.error
    assert record.spec_hash == with_disk.trials[0].hash  # the disk is not a parameter
    used = record.metrics.lms_disk
    assert used.directory == str(disk)
    assert 0 < used.peak_bytes < plan.host_peak_bytes  # about half on the disk, half in RAM
    assert used.write_bandwidth > 0 and used.read_bandwidth > 0  # measured: the plan spilled
    assert list(disk.iterdir()) == []  # its files go with the trial


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
    two = run_trial(
        base.replace(batch=2, gpus=2, memory_budget_bytes=2**30), 600, tmp_path / "two.log"
    )
    everything = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}
    with_lms = base.replace(
        batch=2, gpus=2, lms=check_lms_table(everything), memory_budget_bytes=2**30
    )
    swapped = run_trial(with_lms, 600, tmp_path / "lms.log")
    for result in (one, two, swapped):
        assert result.outcome == "ok", result.error
    assert one.metrics.replicas == 1 and two.metrics.replicas == 2
    # the global batch's rate, and each replica's half of it
    rate, per_replica = two.metrics.images_per_sec, two.metrics.images_per_sec_per_replica
    assert rate.mean == pytest.approx(2 * per_replica.mean)
    workers = two.metrics.workers
    assert [w.outcome for w in workers] == ["ok", "ok"]
    assert workers[0].final_loss == pytest.approx(workers[1].final_loss, rel=1e-6)
    assert two.metrics.final_loss == pytest.approx(one.metrics.final_loss, rel=1e-4)
    assert swapped.metrics.final_loss == pytest.approx(one.metrics.final_loss, rel=1e-4)
    assert swapped.metrics.lms_plan.swapped_bytes > 0
    assert swapped.metrics.lms_traffic.out_bytes_per_step > 0
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
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        env=child_environment(),
        timeout=300,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    kernels = completed.stdout.split()[-1]
    if setting == "0":
        assert kernels == "Eigen"
    else:  # aarch64 keeps TensorFlow's choice (oneDNN's on Neoverse CPUs only)
        x86 = platform.machine() in ("x86_64", "AMD64")
        assert kernels == "oneDNN" if x86 else kernels in ("oneDNN", "Eigen")


def test_a_plan_needing_more_host_memory_than_the_host_has_is_out_of_memory(tmp_path):
    """lms checks the plan's host memory before the step runs (lms.Options.host_memory): the
    trial is an out-of-memory result saying so, and the limits table names host memory."""
    spec = tiny_spec(defaults='lms = {host_memory = "1MiB"}\nmemory_budget = "1GiB"')
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    (record,) = load_trials(tmp_path, "h1")
    assert record.outcome == "out_of_memory"
    assert record.error.startswith("LMS: host memory: the plan holds")
    assert "of host memory given (LMS option host_memory)" in record.error
    assert failure_cause(record.error) == "host memory: the plan needs more than the host has"
