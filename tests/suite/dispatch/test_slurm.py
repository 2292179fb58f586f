"""`SlurmHost` against a real one-node Slurm (scripts/slurm.sh; `inv test` starts it): a job that
fails or is cancelled is recorded with Slurm's reason, a trial the cluster cannot hold is skipped
and its job cancelled, and `max_jobs` is checked. Whole runs: tests/system/test_slurm_runs.py."""

import subprocess
import threading
import time

import pytest
from tiny_specs import TINY

from suite.dispatch.slurm import SlurmHost
from suite.errors import SuiteError
from suite.specs import parse_spec

pytestmark = pytest.mark.slurm


def _tiny_params():
    return parse_spec(TINY, "tiny.toml").trials[0].params


def test_a_job_that_fails_is_recorded_with_slurms_reason(tmp_path):
    host = SlurmHost("cluster", partition="debug", python="/nonexistent/python")
    result = host.run_trial(_tiny_params(), 120, tmp_path / "logs" / "cluster" / "a.log")
    assert result.outcome == "crashed"
    assert result.metrics.slurm_job.isdigit()
    assert f"slurm job {result.metrics.slurm_job} ended FAILED" in result.error
    assert "NonZeroExitCode" in result.error


def test_a_cancelled_job_is_recorded_as_cancelled(tmp_path):
    host = SlurmHost("cluster", partition="debug")
    params = _tiny_params().replace(resolution=512, batch=16, steps=1000)  # minutes of work

    def cancel_when_running():
        for _ in range(600):
            running = subprocess.run(
                ["squeue", "-h", "-t", "R", "-n", f"lms-{params.hash}", "-o", "%i"],
                capture_output=True,
                text=True,
            )
            if running.stdout.strip():
                time.sleep(2)  # let the trial process start
                subprocess.run(["scancel", running.stdout.split()[0]], check=True)
                return
            time.sleep(0.2)

    canceller = threading.Thread(target=cancel_when_running)
    canceller.start()
    result = host.run_trial(params, 600, tmp_path / "logs" / "cluster" / "b.log")
    canceller.join()
    assert result.outcome == "crashed"
    assert "ended CANCELLED" in result.error, result.error


def test_a_trial_the_cluster_cannot_hold_is_skipped_and_its_job_cancelled(tmp_path):
    # a two-node trial on the one-node partition: sbatch accepts it and it would wait forever
    # (PartitionConfig, then PartitionNodeLimit); the host cancels it and records why
    host = SlurmHost("cluster", partition="debug")
    params = _tiny_params().replace(nodes=2)
    result = host.run_trial(params, 120, tmp_path / "logs" / "cluster" / "c.log")
    assert result.outcome == "skipped", result.error
    assert "2 node(s) x 1 task(s)" in result.error
    assert "(PartitionNodeLimit)" in result.error or "(PartitionConfig)" in result.error
    job = result.metrics.slurm_job
    assert host.job_state(job)[0] in ("CANCELLED", "UNKNOWN")
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    assert "PENDING" not in queued.stdout


def test_max_jobs_must_be_a_positive_integer():
    for bad in (0, "2", True):
        with pytest.raises(SuiteError, match=r"suite.hosts.cluster.max_jobs: .*integer >= 1"):
            SlurmHost.from_config("cluster", {"scheduler": "slurm", "max_jobs": bad})
