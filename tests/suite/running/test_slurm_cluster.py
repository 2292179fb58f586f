"""The cluster of a Slurm job's tasks: ports by global rank never collide within a job, nor
between jobs whose ids differ modulo WINDOWS; the peers' addresses come from Slurm's step
variables and `scontrol` (the real two-node cluster of scripts/slurm.sh); a layout other than
blocks is refused; a taken port is named with its node."""

import socket

import pytest

from suite.running.slurm_cluster import (
    PORT_BASE,
    PORT_SPAN,
    WINDOW,
    WINDOWS,
    ClusterError,
    SlurmTask,
    check_port_free,
    slurm_task,
    task_port,
    tasks_per_node,
)


def test_tasks_per_node_reads_slurms_compressed_counts():
    assert tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    assert tasks_per_node("4") == [4]
    with pytest.raises(ClusterError, match=r"SLURM_STEP_TASKS_PER_NODE='2x3' is not Slurm's form"):
        tasks_per_node("2x3")


@pytest.mark.parametrize("job", [1, 63, 64, 12345])
def test_the_tasks_of_a_job_never_share_a_port_however_many_nodes(job):
    # SlurmClusterResolver's rule gave the first task of every node the same port; this one
    # numbers by global rank, so any layout of 512 tasks gets 512 ports, all in the range
    ports = [task_port(job, rank) for rank in range(512)]
    assert len(set(ports)) == 512
    assert all(PORT_BASE <= port < PORT_BASE + PORT_SPAN for port in ports)


def test_jobs_share_ports_only_when_their_ids_are_equal_modulo_windows():
    first = {task_port(100, rank) for rank in range(WINDOW)}
    for other in range(101, 100 + WINDOWS):
        assert first.isdisjoint(task_port(other, rank) for rank in range(WINDOW)), other
    assert task_port(100 + WINDOWS, 0) == task_port(100, 0)  # the rule's stated limit


def test_a_port_base_moves_every_port():
    assert task_port(5, 3, base=30000) - task_port(5, 3) == 30000 - PORT_BASE


def _environ(rank: int, node: str, job: int = 7) -> dict:
    return {
        "SLURM_PROCID": str(rank),
        "SLURM_JOB_ID": str(job),
        "SLURM_STEP_NODELIST": "node[1-2]",
        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
        "SLURMD_NODENAME": node,
    }


@pytest.mark.slurm
def test_a_task_finds_its_peers_on_the_two_node_cluster():
    task = slurm_task(_environ(2, "node2"))
    ports = [task_port(7, rank) for rank in range(4)]
    assert task.workers == tuple(f"127.0.0.1:{port}" for port in ports)  # NodeAddr of both
    assert (task.rank, task.node, task.node_id, task.port) == (2, "node2", 1, ports[2])
    with_base = slurm_task({**_environ(0, "node1"), "SUITE_SLURM_PORT_BASE": "25000"})
    assert with_base.port == task_port(7, 0, base=25000)


@pytest.mark.slurm
def test_a_layout_other_than_blocks_is_refused():
    # cyclic: rank 1 on node2, where blocks of two put it on node1
    with pytest.raises(ClusterError, match="task 1 runs on node2, not on node1.*--distribution"):
        slurm_task(_environ(1, "node2"))


def test_a_taken_port_is_named_with_its_node():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    task = SlurmTask(1, "node2", 1, ("127.0.0.1:1", f"127.0.0.1:{port}"))
    try:
        with pytest.raises(ClusterError, match=rf"^port {port} on node node2 \(.+\) is in use"):
            check_port_free(task)
    finally:
        holder.close()
    check_port_free(task)  # free again
