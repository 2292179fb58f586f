"""Stopping a native `inv run` with real signals: SIGINT and SIGTERM stop the trial in flight and
say so in one line; after SIGKILL the trial ends by itself; either way its scratch directory goes,
finished records stay, and a rerun runs only the missing trial, in the same run."""

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from _held_trial import TWO, HeldTrial, ended, wait_until

from suite.errors import SuiteError
from suite.records import TrialRecord, load, results_file
from suite.running.orphan_guard import ORPHANED_EXIT_CODE
from suite.running.resume import UnfinishedRun
from suite.running.runner import run_spec
from suite.specs import parse_spec

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def held(tmp_path):
    """The trial of 48 px waits, in flight, until released."""
    held = HeldTrial(tmp_path, [48])
    yield held
    held.release()


@pytest.mark.parametrize(
    "signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name
)
def test_a_signal_stops_the_trial_in_flight_and_a_rerun_resumes_the_same_run(
    tmp_path, held, signum
):
    spec_file = tmp_path / "two.toml"
    spec_file.write_text(TWO)
    first, second = parse_spec(TWO, str(spec_file)).trials
    results = tmp_path / "results"
    arguments = ["run", "--spec", spec_file, "--results", results, "--host", "h1"]
    command = [sys.executable, "-m", "invoke", *map(str, arguments)]
    run = subprocess.Popen(
        command, cwd=ROOT, env=held.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    held.wait_reached(process=run)
    (trial,) = held.trial_processes()
    assert len(held.scratch()) == 1
    run.send_signal(signum)
    out, err = run.communicate(timeout=120)
    wait_until(lambda: not held.trial_processes(), 60, "a trial process of the stopped run lives")
    # An exiting process's command line reads empty before its status turns zombie: wait for
    # the trial itself too (CI once saw it still running just after its command line went).
    wait_until(lambda: ended(trial), 60, "the trial process of the stopped run lives")
    wait_until(lambda: not held.scratch(), 60, "the trial's scratch directory is left")
    path = results_file(results, "h1")
    (kept,) = load(path, TrialRecord)
    assert kept.spec_hash == first.hash and kept.outcome == "ok", kept.error
    if signum != signal.SIGKILL:
        name = signal.Signals(signum).name
        assert run.returncode == 128 + signum, (out, err)
        assert "Traceback" not in err
        assert err.strip().splitlines()[-1] == (
            f"stopped: interrupted by {name}: stopped trial {second.describe()} repeat 1/1 "
            f"[{second.hash}]; 1 record of this run kept in {path}; rerun to resume"
        )
    held.release()
    rerun = subprocess.run(
        command, cwd=ROOT, env=held.env, capture_output=True, text=True, timeout=600
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"resuming run {kept.run}" in rerun.stdout
    assert "1 already recorded" in rerun.stdout and "1 to run" in rerun.stdout
    records = load(path, TrialRecord)
    assert [r.spec_hash for r in records] == [first.hash, second.hash]
    assert records[0] == kept and records[1].run == kept.run  # one run, as baseline sees
    assert not list((results / "unfinished").rglob("*.json"))  # completed: a new run next time
    assert not held.scratch()


def test_a_completed_run_is_not_resumed_and_a_broken_marker_is_one_line(tmp_path):
    spec = parse_spec(TWO.replace("[32, 48]", "[32]"), "one.toml")
    run_spec(spec, tmp_path, host="h1", echo=lambda _: None)
    assert not list((tmp_path / "unfinished").rglob("*.json"))
    # an interrupted run's marker names its run: the rerun continues it
    marker = UnfinishedRun(tmp_path, "h1", spec)
    run_id, resumed = marker.begin()
    assert not resumed and marker.begin() == (run_id, True)
    assert marker.begin(fresh=True)[0] != run_id  # --force: a new run
    marker.path.write_text("{not json")
    with pytest.raises(SuiteError, match=r"unfinished/h1/.*\.json: field 'run' must name"):
        run_spec(spec, tmp_path, host="h1", echo=lambda _: None)


GUARDED = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from pathlib import Path
    from suite.running.orphan_guard import exit_with_parent
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    exit_with_parent(int(sys.argv[1]), Path(sys.argv[2]))
    print(os.getpid(), sleeper.pid, flush=True)
    time.sleep(600)
    """
)


def test_a_process_whose_parent_is_killed_ends_its_children_and_removes_its_scratch(tmp_path):
    """The orphan guard alone, without TensorFlow: a parent killed by SIGKILL; its child (the
    trial process) and the child's own child (a replica worker) end, the scratch goes."""
    scratch = tmp_path / "trial-x"
    scratch.mkdir()
    (scratch / "params.json").write_text("{}")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    parent_code = (
        "import os, subprocess, sys; subprocess.run([sys.executable, '-c', "
        f"{GUARDED!r}, str(os.getpid()), {str(scratch)!r}])"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", parent_code], stdout=subprocess.PIPE, text=True, env=env
    )
    guarded, sleeper = (psutil.Process(int(pid)) for pid in parent.stdout.readline().split())
    assert guarded.ppid() == parent.pid and scratch.exists()
    parent.kill()
    parent.wait()
    wait_until(lambda: ended(guarded) and ended(sleeper), 60, "the orphan or its child lives")
    assert not scratch.exists()


def test_a_process_armed_after_its_parent_died_ends_at_once(tmp_path):
    scratch = tmp_path / "trial-y"
    scratch.mkdir()
    code = (
        "from pathlib import Path; from suite.running.orphan_guard import exit_with_parent; "
        f"exit_with_parent(os.getppid() + 1, Path({str(scratch)!r}))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", f"import os; {code}"]
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60)
    assert completed.returncode == ORPHANED_EXIT_CODE, completed.stderr
    assert "is gone; ending it and removing" in completed.stderr
    assert not scratch.exists()


def test_a_limit_searchs_simulator_child_ends_when_its_search_is_gone(tmp_path):
    """`suite.running.predict` (the search's bracket, minutes of tracing) armed for a parent
    that is not its own, as after a SIGKILL of the search: it ends at once and takes the
    request's directory with it."""
    scratch = tmp_path / "suite-predict-x"
    scratch.mkdir()
    request = scratch / "request.json"
    request.write_text('{"candidates": [], "mode": "off"}')
    answer, parent = str(scratch / "answer.json"), f"--parent={os.getpid() + 1}"
    command = [sys.executable, "-m", "suite.running.predict", str(request), answer, parent]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    completed = subprocess.run(
        command, capture_output=True, text=True, cwd=ROOT, env=env, timeout=120
    )
    assert completed.returncode == ORPHANED_EXIT_CODE, completed.stderr
    assert not scratch.exists()
