"""Running a spec (suite.running.runner): what is recorded is not run again unless forced, a
failing trial does not stop the run, a killed run resumes where it stopped, repeats run in
rounds."""

import os
import signal
import subprocess
import sys
import time

import pytest
from trial_cases import ROOT, TINY, tiny_spec

from suite.records import TrialRecord, load, load_trials
from suite.running.runner import run_spec
from suite.specs import parse_spec
from suite.workloads.data import write_tfrecords

pytestmark = pytest.mark.slow


def test_force_runs_recorded_trials_again_as_a_new_run(tmp_path):
    first = run_spec(tiny_spec(), tmp_path, host="h1", echo=lambda _: None)
    again = run_spec(tiny_spec(), tmp_path, host="h1", force=True, echo=lambda _: None)
    assert first.outcomes == again.outcomes == {"ok": 1} and again.skipped == 0
    records = load_trials(tmp_path, "h1")
    assert len(records) == 2 and records[0].spec_hash == records[1].spec_hash
    assert records[0].run != records[1].run


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
    records = load_trials(tmp_path, "h1")
    assert all("no TFRecord files" in r.error for r in records)


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
    while time.monotonic() < deadline and not (path.exists() and load(path, TrialRecord)):
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # the runner and the trial in flight
    process.wait()
    first = load(path, TrialRecord)
    assert 1 <= len(first) < 3
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert completed.returncode == 0, completed.stderr
    assert f"{len(first)} already recorded" in completed.stdout
    records = load(path, TrialRecord)
    assert len(records) == 3
    assert len({r.spec_hash for r in records}) == 3
    assert records[: len(first)] == first
    assert {r.run for r in records} == {first[0].run}  # the resumed run is the same run


def test_repeats_run_in_rounds_so_compared_trials_share_the_machine_load(tmp_path):
    """Round r runs every trial's r-th process: LMS off and on (or two sizes) are interleaved,
    not all repeats of one and then all of the other."""
    spec = tiny_spec("[32, 48]", "repeats = 2")
    lines = []
    run_spec(spec, tmp_path, host="h", echo=lines.append)
    order = [(r.params.resolution, r.repeat) for r in load_trials(tmp_path, "h")]
    assert order == [(32, 0), (48, 0), (32, 1), (48, 1)]
    assert [line.split("]")[0] for line in lines if line.startswith("[trial")] == [
        "[trial 1/4",
        "[trial 2/4",
        "[trial 3/4",
        "[trial 4/4",
    ]
