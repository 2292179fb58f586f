"""Two Slurm nodes for real (scripts/slurm.sh: node1 and node2, two `slurmd -N` on this machine,
both at 127.0.0.1): a trial of `nodes = 2` is one job whose workers run on both nodes and train
exactly as two workers on one node do; a worker whose port is taken fails the trial with one line
naming the port and the node; a node that dies mid-trial (its slurmd, step daemons and tasks
killed) ends the trial as a recorded NODE_FAIL and the spec's other trials still run."""

import socket
import subprocess
import time
from pathlib import Path

import pytest
from slurm_nodes import kill_node, node_state, revive_node

from suite.records import load_host, load_trials
from suite.running.slurm_cluster import PORT_SPAN, WINDOW, WINDOWS

pytestmark = pytest.mark.slurm
ROOT = Path(__file__).resolve().parents[2]

STUDY = """
[[study]]
name = "{name}"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 1
{extra}
"""


def _spec(path: Path, steps: int, *studies: tuple[str, str]) -> Path:
    text = f'name = "nodes"\n[defaults]\nsteps = {steps}\nwarmup_steps = 1\ntimeout = 600\n'
    text += 'memory_budget = "1GiB"\n'  # CPU workers stand for GPUs: the emulated device
    text += "".join(STUDY.format(name=name, extra=extra) for name, extra in studies)
    path.write_text(text)
    return path


def _run(tmp_path, spec: Path, host: str = "{scheduler: slurm, partition: debug}", **popen):
    config = tmp_path / "hosts.yaml"
    config.write_text(f"suite:\n  hosts:\n    cluster: {host}\n")
    command = [str(ROOT / "inv"), "-f", str(config), "run", "--spec", str(spec)]
    command += ["--hosts", "cluster", "--results", str(tmp_path / "r")]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen
    )


def test_trials_are_jobs_and_a_two_node_trial_runs_on_both_nodes_and_trains_as_one_node_does(
    tmp_path,
):
    """Also `inv run --hosts cluster`'s plain case (test_slurm_runs.py's cases stop runs): each
    trial is a job of its own, the two-replica one on one node gets its cluster from Slurm, and
    the host description is captured by a job on a node. One run for both: each run pays its
    trials' TensorFlow starts and a description job."""
    spec = _spec(
        tmp_path / "nodes.toml",
        3,
        ("two-nodes", "nodes = 2"),
        ("one-node", "gpus = 2"),
        ("single", ""),
    )
    run = _run(tmp_path, spec)
    output = run.communicate(timeout=900)[0]
    assert run.returncode == 0, output
    assert "running nodes as Slurm jobs on cluster" in output
    spread, packed, single = load_trials(tmp_path / "r", "cluster")
    assert (spread.outcome, packed.outcome) == ("ok", "ok"), (spread.error, packed.error)
    assert single.outcome == "ok", single.error
    jobs = {spread.metrics.slurm_job, packed.metrics.slurm_job, single.metrics.slurm_job}
    assert len(jobs) == 3 and all(job.isdigit() for job in jobs)
    assert (spread.params.nodes, spread.params.gpus, spread.metrics.replicas) == (2, 1, 2)
    # one job, a worker on each node: Slurm's node index and name, the machine, the port
    first, second = spread.metrics.workers
    assert (first.placement.node_id, first.placement.node) == (0, "node1")
    assert (second.placement.node_id, second.placement.node) == (1, "node2")
    assert first.placement.hostname == second.placement.hostname == socket.gethostname()
    assert first.placement.address != second.placement.address  # same address, two ports
    # the two-replica trial on one node: two tasks of one job, joined by
    # suite/running/slurm_cluster.py
    assert packed.metrics.replicas == 2
    assert [w.outcome for w in packed.metrics.workers] == ["ok", "ok"]
    assert {w.placement.node for w in packed.metrics.workers} == {"node1"}
    # the same global batch (2) split the same way: the same updates, the same loss
    losses = [w.final_loss for w in (*spread.metrics.workers, *packed.metrics.workers)]
    assert losses == pytest.approx([losses[0]] * 4, rel=1e-6), losses
    # the host description was captured by a job on a node
    description = load_host(tmp_path / "r", single.host_ref)
    assert description.architecture and description.link["memcpy_gbps"]


def test_a_worker_whose_port_is_taken_fails_the_trial_naming_the_port_and_node(tmp_path):
    # the job's id is not known before it is submitted: hold rank 1's port in every window
    base = 26000
    holders = []
    for window in range(WINDOWS):
        holder = socket.socket()
        holder.bind(("127.0.0.1", base + (window * WINDOW + 1) % PORT_SPAN))
        holder.listen()
        holders.append(holder)
    spec = _spec(tmp_path / "nodes.toml", 2, ("two-nodes", "nodes = 2"), ("single", ""))
    try:
        host = f"{{scheduler: slurm, partition: debug, port_base: {base}}}"
        run = _run(tmp_path, spec, host)
        output = run.communicate(timeout=900)[0]
    finally:
        for holder in holders:
            holder.close()
    assert run.returncode == 0, output  # a failed trial is a result, not a failed run
    failed, single = load_trials(tmp_path / "r", "cluster")
    assert single.outcome == "ok", single.error
    assert failed.outcome == "crashed"
    job = failed.metrics.slurm_job
    first_line = failed.error.splitlines()[0]
    assert first_line.startswith(f"slurm job {job}: worker 1 on node2: ClusterError: port "), (
        failed.error
    )
    assert f" on node node2 ({socket.gethostname()}) is in use" in first_line
    port = int(first_line.split("port ")[1].split()[0])
    assert (port - base) % WINDOW == 1
    assert "worker 0 on node1: " in failed.error or "worker 0: left no result" in failed.error
    assert f"crashed: slurm job {job}: worker 1 on node2: ClusterError: port {port}" in output


@pytest.fixture
def node2_revived():
    """node2 comes back after the test, whatever happened to it."""
    yield "node2"
    revive_node("node2")


def _wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


def test_a_node_that_dies_mid_trial_is_a_recorded_failure_and_the_spec_goes_on(
    tmp_path, node2_revived
):
    spec = _spec(
        tmp_path / "nodes.toml", 100000, ("two-nodes", "nodes = 2"), ("after", "steps = 2")
    )
    run = _run(tmp_path, spec)
    try:
        logs = tmp_path / "r" / "logs" / "cluster"

        def both_workers_train():  # each worker logs its first step
            return any(log.read_text().count("step 1/") >= 2 for log in logs.glob("*.log"))

        _wait_for(both_workers_train, 300, "both workers' first step")
        killed = kill_node(node2_revived)
        assert len(killed) >= 3  # slurmd, the step's slurmstepd, the worker
        output = run.communicate(timeout=600)[0]
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 0, output
    died, after = load_trials(tmp_path / "r", "cluster")
    assert after.outcome == "ok", after.error  # on node1, while node2 is down
    assert {w.placement.node for w in after.metrics.workers or ()} <= {"node1"}
    assert died.outcome == "crashed"
    job = died.metrics.slurm_job
    assert died.error.startswith(f"slurm job {job} ended NODE_FAIL (reason: NodeDown"), died.error
    assert "down: node2: Not responding" in died.error
    assert node_state("node2").startswith("down")
