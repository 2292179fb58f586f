"""`SlurmHost` against a real two-node Slurm (scripts/slurm.sh; `inv test` starts it): a job that
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
    # a three-node trial on the two-node partition: sbatch accepts it and it would wait
    # forever (PartitionConfig, then PartitionNodeLimit); the host cancels it and records why
    host = SlurmHost("cluster", partition="debug")
    params = _tiny_params().replace(nodes=3)
    result = host.run_trial(params, 120, tmp_path / "logs" / "cluster" / "c.log")
    assert result.outcome == "skipped", result.error
    assert "3 node(s) x 1 task(s)" in result.error
    assert "(PartitionNodeLimit)" in result.error or "(PartitionConfig)" in result.error
    job = result.metrics.slurm_job
    assert host.job_state(job)[0] in ("CANCELLED", "UNKNOWN")
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True)
    assert "PENDING" not in queued.stdout


def test_max_jobs_must_be_a_positive_integer():
    for bad in (0, "2", True):
        with pytest.raises(SuiteError, match=r"suite.hosts.cluster.max_jobs: .*integer >= 1"):
            SlurmHost.from_config("cluster", {"scheduler": "slurm", "max_jobs": bad})


def test_port_base_and_request_gpus_are_checked():
    for bad in (80, 70000, "20000", True):
        with pytest.raises(SuiteError, match=r"suite.hosts.cluster.port_base: .*from 1024 to"):
            SlurmHost.from_config("cluster", {"scheduler": "slurm", "port_base": bad})
    with pytest.raises(SuiteError, match=r"suite.hosts.cluster.request_gpus: 'yes'; true or false"):
        SlurmHost.from_config("cluster", {"scheduler": "slurm", "request_gpus": "yes"})


def test_a_job_asks_for_gpus_as_gres_only_when_the_host_says_so():
    plain = SlurmHost("cluster")._sbatch_options(5, 2, 4, 4)
    assert "--nodes=2" in plain and "--ntasks-per-node=4" in plain and "--no-requeue" in plain
    assert not any(option.startswith("--gpus") for option in plain)
    asking = SlurmHost("cluster", request_gpus=True)._sbatch_options(5, 2, 4, 4)
    assert "--gpus-per-node=4" in asking
