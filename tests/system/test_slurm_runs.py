"""`inv run --hosts cluster` against a real Slurm (scripts/slurm.sh: munge, slurmctld and two
slurmd on this machine; `inv test` starts it): `max_jobs` trials are queued at once. A run
stopped by SIGINT or SIGTERM cancels its jobs; after a SIGKILL they end by themselves; a rerun
resumes the same run. That trials become jobs, that a two-replica trial gets its cluster from
Slurm and that the host description comes from a job: test_slurm_nodes.py's first test, in the
run it makes anyway. (suite/dispatch/slurm.py's own cases: tests/suite/dispatch/test_slurm.py.)"""

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _held_trial import TWO, HeldTrial, wait_until

from suite.records import TrialRecord, load, load_trials, results_file
from suite.running.heartbeat import STALE_S
from suite.specs import parse_spec

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]

TINY = """
name = "tiny-slurm"
[defaults]
steps = 2
warmup_steps = 0
timeout = 300
[[study]]
name = "one"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 2
"""


def inv(config, *args) -> list[str]:
    """The command line of `./inv -f CONFIG ARGS...`."""
    return [str(ROOT / "inv"), "-f", str(config), *map(str, args)]


def test_max_jobs_submits_a_specs_trials_at_once(tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(
        TINY.split("[[study]]")[0] + "repeats = 2\n" + "[[study]]" + TINY.split("[[study]]")[1]
    )
    config = tmp_path / "hosts.yaml"
    config.write_text(
        "suite:\n  hosts:\n    cluster: {scheduler: slurm, partition: debug, max_jobs: 2}\n"
    )
    run = inv(config, "run", "--spec", spec, "--hosts", "cluster", "--results", tmp_path / "r")
    completed = subprocess.run(run, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    first, second = sorted(load_trials(tmp_path / "r", "cluster"), key=lambda r: r.repeat)
    assert (first.outcome, second.outcome) == ("ok", "ok")
    assert first.metrics.slurm_job != second.metrics.slurm_job
    # both submitted before either ended (a trial takes seconds: TensorFlow's import alone)
    assert max(first.started_at, second.started_at) < min(first.finished_at, second.finished_at)
    again = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert "2 already recorded" in again.stdout and "0 to run" in again.stdout, again.stdout


def _queued(trial) -> list[str]:
    """The ids of the jobs of `trial` still in the queue (any state)."""
    listed = subprocess.run(
        ["squeue", "-h", "-n", f"lms-{trial.hash}", "-o", "%i"],
        capture_output=True,
        text=True,
        check=True,
    )
    return listed.stdout.split()


def _start_held_run(tmp_path, held_resolutions, max_jobs=1):
    """`inv run` of TWO on a Slurm host, with the trials of `held_resolutions` held in flight."""
    held = HeldTrial(tmp_path, held_resolutions)
    spec = tmp_path / "two.toml"
    spec.write_text(TWO)
    config = tmp_path / "hosts.yaml"
    config.write_text(
        "suite:\n  hosts:\n    cluster: {scheduler: slurm, partition: debug, "
        f"max_jobs: {max_jobs}}}\n"
    )
    command = [
        sys.executable,
        "-m",
        "invoke",
        "-f",
        str(config),
        "run",
        "--spec",
        str(spec),
        "--hosts",
        "cluster",
        "--results",
        str(tmp_path / "r"),
    ]
    run = subprocess.Popen(
        command, cwd=ROOT, env=held.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    held.wait_reached(len(held_resolutions), process=run)
    return held, command, run, parse_spec(TWO, str(spec)).trials


def _rerun_resumes(held, command, tmp_path, kept: list[dict], trials) -> None:
    """After release, the rerun runs only what has no record, in the run that was stopped."""
    held.release()
    rerun = subprocess.run(
        command, cwd=ROOT, env=held.env, capture_output=True, text=True, timeout=900
    )
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert f"{len(kept)} already recorded" in rerun.stdout
    records = load_trials(tmp_path / "r", "cluster")
    assert sorted(r.spec_hash for r in records) == sorted(t.hash for t in trials)
    assert all(r.outcome == "ok" for r in records), [r.error for r in records]
    assert records[: len(kept)] == kept
    assert len({r.run for r in records}) == 1  # one run, as `inv baseline` groups them
    assert not list((tmp_path / "r" / "slurm" / "jobs").iterdir())


def test_sigint_cancels_the_job_in_flight_says_so_and_a_rerun_resumes(tmp_path):
    held, command, run, (first, second) = _start_held_run(tmp_path, [48])
    try:
        (job,) = _queued(second)
        run.send_signal(signal.SIGINT)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 130, out + err
        path = results_file(tmp_path / "r", "cluster")
        assert err.strip().splitlines()[-1] == (
            f"stopped: interrupted by SIGINT: stopped trial {second.describe()} repeat 1/1 "
            f"[{second.hash}] (slurm job {job} cancelled); 1 record of this run kept in {path}; "
            "rerun to resume"
        )
        wait_until(lambda: not _queued(second), 60, f"slurm job {job} is still queued")
        wait_until(lambda: not held.trial_processes(tmp_path / "r"), 60, "a trial process lives")
        (kept,) = load(path, TrialRecord)
        assert kept.spec_hash == first.hash
        # the job's directory (parameters, heartbeat) went with it
        assert not list((tmp_path / "r" / "slurm" / "jobs").iterdir())
        _rerun_resumes(held, command, tmp_path, [kept], [first, second])
    finally:
        held.release()


def test_after_a_sigkill_of_the_run_its_job_ends_by_itself(tmp_path):
    """SIGKILL cannot be caught: the job notices that the run's heartbeat stopped."""

    held, command, run, (first, second) = _start_held_run(tmp_path, [48])
    try:
        (job,) = _queued(second)
        run.send_signal(signal.SIGKILL)
        run.communicate(timeout=60)
        wait_until(lambda: not _queued(second), STALE_S + 120, f"slurm job {job} is still queued")
        wait_until(lambda: not held.trial_processes(tmp_path / "r"), 60, "a trial process lives")
        log = (tmp_path / "r" / "logs" / "cluster" / f"{second.hash}-0.log").read_text()
        assert "the run that submitted this job is gone" in log
        assert not list((tmp_path / "r" / "slurm" / "jobs").iterdir())  # the job removed its own
        kept = load_trials(tmp_path / "r", "cluster")
        assert [r.spec_hash for r in kept] == [first.hash]
        _rerun_resumes(held, command, tmp_path, kept, [first, second])
    finally:
        held.release()


def test_sigterm_cancels_every_job_of_max_jobs_waited_for_by_threads(tmp_path):
    held, command, run, trials = _start_held_run(tmp_path, [32, 48], max_jobs=2)
    try:
        jobs = {trial.hash: _queued(trial)[0] for trial in trials}
        run.send_signal(signal.SIGTERM)
        out, err = run.communicate(timeout=120)
        assert run.returncode == 143, out + err
        line = err.strip().splitlines()[-1]
        assert line.startswith("stopped: interrupted by SIGTERM: stopped trial ")
        for trial in trials:
            assert f"[{trial.hash}] (slurm job {jobs[trial.hash]} cancelled)" in line
        assert "; 0 records of this run kept in " in line
        wait_until(lambda: not any(_queued(t) for t in trials), 60, "a job is still queued")
        assert load_trials(tmp_path / "r", "cluster") == []
        _rerun_resumes(held, command, tmp_path, [], trials)
    finally:
        held.release()
