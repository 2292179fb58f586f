"""A Slurm cluster as a host, against a real one-node Slurm (scripts/slurm.sh: munge, slurmctld,
slurmd on this machine; `inv test` starts it): trials become jobs, a two-replica trial gets its
cluster from Slurm, and jobs that fail or are cancelled are recorded with Slurm's reason."""

import subprocess
import threading
import time
from pathlib import Path

import pytest

from suite.records import load_host, load_records, results_file
from suite.running.slurm import SlurmHost

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[1]

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
[[study]]
name = "two"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 1
gpus = 2
memory_budget = "1GiB"
"""


def test_inv_run_on_a_slurm_host_records_jobs_and_two_replicas(tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    config = tmp_path / "hosts.yaml"
    config.write_text("suite:\n  hosts:\n    cluster: {scheduler: slurm, partition: debug}\n")
    completed = subprocess.run(
        [str(ROOT / "inv"), "-f", str(config), "run", "--spec", str(spec), "--hosts", "cluster",
         "--results", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output
    assert "running tiny-slurm as Slurm jobs on cluster" in output
    one, two = load_records(results_file(tmp_path / "r", "cluster"))
    assert (one["outcome"], two["outcome"]) == ("ok", "ok"), (one["error"], two["error"])
    jobs = {one["metrics"]["slurm_job"], two["metrics"]["slurm_job"]}
    assert len(jobs) == 2 and all(job.isdigit() for job in jobs)
    # two tasks of one job, joined by SlurmClusterResolver: the same loss on both workers
    assert two["metrics"]["replicas"] == 2
    first, second = two["metrics"]["workers"]
    assert first["outcome"] == second["outcome"] == "ok"
    assert first["final_loss"] == pytest.approx(second["final_loss"], rel=1e-6)
    # the host description was captured by a job on the node
    description = load_host(tmp_path / "r", one["host_ref"])
    assert description["architecture"] and description["link"]["memcpy_gbps"]


def _tiny_params():
    from suite.specs import parse_spec

    return parse_spec(TINY, "tiny.toml").trials[0].params


def test_a_job_that_fails_is_recorded_with_slurms_reason(tmp_path):
    host = SlurmHost("cluster", partition="debug", python="/nonexistent/python")
    result = host.run_trial(_tiny_params(), 120, tmp_path / "logs" / "cluster" / "a.log")
    assert result.outcome == "crashed"
    assert result.metrics["slurm_job"].isdigit()
    assert f"slurm job {result.metrics['slurm_job']} ended FAILED" in result.error
    assert "NonZeroExitCode" in result.error


def test_a_cancelled_job_is_recorded_as_cancelled(tmp_path):
    host = SlurmHost("cluster", partition="debug")
    params = _tiny_params().replace(resolution=512, batch=16, steps=1000)  # minutes of work

    def cancel_when_running():
        for _ in range(600):
            running = subprocess.run(["squeue", "-h", "-t", "R", "-n", f"lms-{params.hash}",
                                      "-o", "%i"], capture_output=True, text=True)  # fmt: skip
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
    job = result.metrics["slurm_job"]
    assert host.job_state(job)[0] in ("CANCELLED", "UNKNOWN")
    queued = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True,
                            text=True)  # fmt: skip
    assert "PENDING" not in queued.stdout


def test_max_jobs_submits_a_specs_trials_at_once(tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY.split("[[study]]")[0] + "repeats = 2\n" + "[[study]]" +
                    TINY.split("[[study]]")[1])  # fmt: skip
    config = tmp_path / "hosts.yaml"
    config.write_text(
        "suite:\n  hosts:\n    cluster: {scheduler: slurm, partition: debug, max_jobs: 2}\n"
    )
    run = [str(ROOT / "inv"), "-f", str(config), "run", "--spec", str(spec), "--hosts",
           "cluster", "--results", str(tmp_path / "r")]  # fmt: skip
    completed = subprocess.run(run, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    first, second = sorted(load_records(results_file(tmp_path / "r", "cluster")),
                           key=lambda r: r["repeat"])  # fmt: skip
    assert (first["outcome"], second["outcome"]) == ("ok", "ok")
    assert first["metrics"]["slurm_job"] != second["metrics"]["slurm_job"]
    # both submitted before either ended (a trial takes seconds: TensorFlow's import alone)
    assert max(first["started_at"], second["started_at"]) < min(
        first["finished_at"], second["finished_at"]
    )
    again = subprocess.run(run, capture_output=True, text=True, timeout=300)
    assert "2 already recorded" in again.stdout and "0 to run" in again.stdout, again.stdout


def test_max_jobs_must_be_a_positive_integer():
    from suite.errors import SuiteError

    for bad in (0, "2", True):
        with pytest.raises(SuiteError, match=r"suite.hosts.cluster.max_jobs: .*integer >= 1"):
            SlurmHost.from_config("cluster", {"scheduler": "slurm", "max_jobs": bad})
