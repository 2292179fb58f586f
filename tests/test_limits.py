"""Limit searches and switch sweeps with real trials on the emulated device (GoogLeNet, batch 2,
a 165 MiB budget: 256px fits, 288px does not on this suite's TensorFlow)."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from suite.limits import load_search_records, predictions_file, searches_file
from suite.records import load_records, results_file
from suite.report import render_report
from suite.runner import run_spec
from suite.specs import parse_spec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]
VALUES = list(range(160, 353, 32))

SPEC = """
name = "limits"
[defaults]
steps = 1
warmup_steps = 1
memory_budget = "165MiB"
timeout = {timeout}

[[study]]
name = "stepping"
kind = "sweep"
workload = "googlenet"
batch = 2
resolutions = {{ start = 160, stop = 352, step = 32 }}

[[study]]
name = "switch"
kind = "sweep"
workload = "googlenet"
batch = 2
resolutions = [224, 256, 288, 320]
lms_mode = "switch"

[[study]]
name = "max-res"
kind = "max-resolution"
workload = "googlenet"
batch = 2
start = 160
stop = 352
step = 32
lms_mode = "off"
"""


def spec(timeout=300):
    return parse_spec(SPEC.format(timeout=timeout), "limits.toml")


def quiet(_line):
    pass


@pytest.fixture(scope="module")
def stepped(tmp_path_factory):
    """The seeds' way: every candidate resolution, one trial each (host "step")."""
    results = tmp_path_factory.mktemp("results")
    run_spec(spec(), results, host="step", echo=quiet, studies=("stepping",))
    outcomes = {
        r["params"]["resolution"]: r["outcome"] for r in load_records(results_file(results, "step"))
    }
    assert sorted(outcomes) == VALUES
    boundary = max((v for v, o in outcomes.items() if o == "ok"), default=None)
    assert boundary is not None and boundary < VALUES[-1], outcomes  # the budget cuts inside
    assert all(o == "ok" for v, o in outcomes.items() if v <= boundary)
    return results, boundary


def test_search_finds_the_boundary_that_stepping_finds_with_fewer_trials(stepped, tmp_path):
    _, boundary = stepped
    lines = []
    summary = run_spec(spec(), tmp_path, host="h1", echo=lines.append, studies=("max-res",))
    (record,) = summary.searches
    assert record["largest_ok"] == boundary and record["smallest_failed"] == boundary + 32
    assert record["failed_outcome"] == "out_of_memory" and not record["stop_reached"]
    assert record["trials_run"] <= 4 < len(VALUES)
    assert record["prediction"]["largest_fit"] is not None
    trials = load_records(results_file(tmp_path, "h1"))
    assert len(trials) == record["trials_run"]
    assert all(t["spec"]["search"] == record["search_hash"] for t in trials)
    assert any("bracket trains<=" in line for line in lines)
    # recorded: a second run neither searches nor runs anything
    again = run_spec(spec(), tmp_path, host="h1", echo=quiet, studies=("max-res",))
    assert not again.outcomes and again.searches[0]["search_hash"] == record["search_hash"]
    assert len(load_search_records(tmp_path)) == 1
    report = render_report(tmp_path, tmp_path / "report").read_text()
    assert "## Limits" in report and f"| {boundary} " in report


def test_search_reuses_trials_already_recorded(stepped):
    results, boundary = stepped
    summary = run_spec(spec(), results, host="step", echo=quiet, studies=("max-res",))
    (record,) = summary.searches
    assert record["largest_ok"] == boundary and record["trials_run"] == 0
    assert all(t["reused"] for t in record["trials"])


FAULT = """
import json, os, sys, time
fault, value = os.environ["LIMITS_TEST_FAULT"].split(":")
if sys.argv[0] == "-m" and len(sys.argv) == 3:
    params = json.load(open(sys.argv[1]))
    if params.get("resolution") == int(value):
        if fault == "crash":
            os._exit(3)
        time.sleep(3600)
"""


@pytest.mark.parametrize("fault, outcome", [("crash", "crashed"), ("hang", "timed_out")])
def test_a_crash_or_time_out_mid_search_is_a_recorded_boundary(tmp_path, fault, outcome):
    """The fault is injected from outside the suite: a sitecustomize on the trial's PYTHONPATH."""
    (tmp_path / "inject").mkdir()
    (tmp_path / "inject" / "sitecustomize.py").write_text(FAULT)
    env = {"PYTHONPATH": str(tmp_path / "inject"), "LIMITS_TEST_FAULT": f"{fault}:288"}
    summary = run_spec(
        spec(timeout=60), tmp_path, "h1", echo=quiet, extra_env=env, studies=("max-res",)
    )
    (record,) = summary.searches
    assert (record["largest_ok"], record["smallest_failed"]) == (256, 288)
    assert record["failed_outcome"] == outcome
    by_value = {t["value"]: t["outcome"] for t in record["trials"]}
    assert by_value[288] == outcome and by_value[256] == "ok"
    outcomes = [r["outcome"] for r in load_records(results_file(tmp_path, "h1"))]
    assert outcome in outcomes


def test_an_interrupted_search_resumes_without_redoing_trials(tmp_path):
    path = tmp_path / "limits.toml"
    path.write_text(SPEC.format(timeout=300))
    command = [str(ROOT / "inv"), "search", "--spec", str(path), "--study", "max-res",
               "--results", str(tmp_path / "r"), "--host", "k"]  # fmt: skip
    process = subprocess.Popen(
        command, cwd=ROOT, start_new_session=True, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    records = results_file(tmp_path / "r", "k")
    deadline = time.monotonic() + 600
    while not (records.exists() and records.read_text().count("\n") >= 1):
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.5)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    first = load_records(records)
    assert len(first) == 1 and not searches_file(tmp_path / "r", "k").exists()
    summary = run_spec(spec(), tmp_path / "r", "k", echo=quiet, studies=("max-res",))
    (record,) = summary.searches
    assert record["trials"][0]["spec_hash"] == first[0]["spec_hash"]
    assert record["trials"][0]["reused"] and record["trials_run"] == len(record["trials"]) - 1
    hashes = [r["spec_hash"] for r in load_records(records)]
    assert len(hashes) == len(set(hashes))  # no trial ran twice
    assert len(load_records(predictions_file(tmp_path / "r", "k"), lambda r, w: r)) == 1


def test_switch_sweep_turns_lms_on_where_the_model_stops_fitting_and_plots(stepped):
    results, boundary = stepped
    lines = []
    run_spec(spec(), results, host="step", echo=lines.append, studies=("switch",))
    records = [r for r in load_records(results_file(results, "step")) if "lms" in r["params"]]
    with_lms = [r for r in (224, 256, 288, 320) if r > boundary]
    switch_at = with_lms[0]
    assert sorted(r["params"]["resolution"] for r in records) == with_lms
    assert any(f"LMS becomes necessary at {switch_at}px" in line for line in lines)
    report_path = render_report(results, results / "report")
    report = report_path.read_text()
    assert f"LMS became necessary at {switch_at}px" in report
    (plot,) = (results / "report").glob("sweep-googlenet-*.png")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(records)  # records stay plain JSON
