"""The cluster of a Slurm job's tasks, for MultiWorkerMirroredStrategy, with ports that cannot
collide however the tasks are laid out.

Why not TensorFlow's `SlurmClusterResolver`: it numbers ports per node (port base + the task's
index on its node), so two nodes that share an address (two `slurmd -N` on one machine, as in the
tests; nodes behind one address) give their first tasks the same port, and TensorFlow's gRPC
server binds its port on every address of the machine: the second worker cannot start, or worse,
shares the port (gRPC sets SO_REUSEPORT) and receives half of another worker's traffic.

The rule here: task r of job j listens on
    port_base + (j mod WINDOWS) x WINDOW + r          (wrapping inside PORT_SPAN)
so the tasks of one job never share a port (their global ranks differ), and two jobs on one node
share one only when their ids are equal modulo WINDOWS (64) and both run at once. Before
TensorFlow binds it, each task checks that no process holds its port (a plain bind, without
SO_REUSEPORT, fails on any listening holder): a taken port fails the trial with one line naming
the port and the node instead of a hang or a shared port.

A task's peers are found from Slurm's step variables (`SLURM_STEP_NODELIST`,
`SLURM_STEP_TASKS_PER_NODE`, block distribution, which the job's `srun` asks for) and each node's
address from `scontrol show node` (its NodeAddr: the name itself on most clusters, 127.0.0.1
here). The result is written as `TF_CONFIG`, the same way the one-node launcher
(suite/running/replicas.py) describes its cluster.
"""

import os
import re
import socket
import subprocess
from dataclasses import dataclass

PORT_BASE = 20000  # below Linux's ephemeral range (32768-60999): no outgoing connection takes it
PORT_SPAN = 8192
WINDOW = 128  # the ranks of one job before its ports run into the next window
WINDOWS = PORT_SPAN // WINDOW
PORT_BASE_VARIABLE = "SUITE_SLURM_PORT_BASE"  # a Slurm host's `port_base` (invoke.yaml)


class ClusterError(Exception):
    """A task cannot take its place in the job's cluster (its port is taken, Slurm's layout is
    not the one asked for)."""


@dataclass(frozen=True)
class SlurmTask:
    """This task's place in its job: its global rank, its node, the addresses of all workers."""

    rank: int
    node: str
    node_id: int
    workers: tuple[str, ...]  # "address:port" by rank

    @property
    def address(self) -> str:
        return self.workers[self.rank]

    @property
    def port(self) -> int:
        return int(self.address.rsplit(":", 1)[1])


def task_port(job_id: int, rank: int, base: int = PORT_BASE) -> int:
    """The port of task `rank` of job `job_id` (the rule in this module's docstring)."""
    if not 0 <= rank < PORT_SPAN:
        raise ClusterError(f"task rank {rank}: this rule numbers at most {PORT_SPAN} tasks")
    return base + ((job_id % WINDOWS) * WINDOW + rank) % PORT_SPAN


def tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed task counts, e.g. "2(x3),1" -> [2, 2, 2, 1]."""
    counts = []
    for part in text.split(","):
        match = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not match:
            raise ClusterError(f"SLURM_STEP_TASKS_PER_NODE={text!r} is not Slurm's form")
        counts += [int(match[1])] * int(match[2] or 1)
    return counts


def _scontrol(*args: str) -> str:
    completed = subprocess.run(["scontrol", *args], capture_output=True, text=True)
    if completed.returncode != 0:
        raise ClusterError(f"scontrol {' '.join(args)}: {completed.stderr.strip()[:300]}")
    return completed.stdout


def node_names(nodelist: str) -> list[str]:
    """A Slurm host list ("node[1-2]") expanded, in Slurm's order."""
    return _scontrol("show", "hostnames", nodelist).split()


def node_addresses(names: list[str]) -> dict[str, str]:
    """Each node's NodeAddr (where its tasks are reached), from `scontrol show node`."""
    addresses = {}
    for line in _scontrol("show", "node", "-o", ",".join(names)).splitlines():
        fields = dict(re.findall(r"(\w+)=(\S*)", line))
        if "NodeName" in fields:
            addresses[fields["NodeName"]] = fields.get("NodeAddr") or fields["NodeName"]
    missing = [name for name in names if name not in addresses]
    if missing:
        raise ClusterError(f"scontrol show node does not know {', '.join(missing)}")
    return addresses


def slurm_task(environ=os.environ) -> SlurmTask:
    """This task's place, from the step's variables: tasks are laid out in blocks (ranks
    0..k-1 on the first node of the step, and so on), which the job's `srun
    --distribution=block` asks for; any other layout is refused rather than guessed."""
    rank = int(environ["SLURM_PROCID"])
    job_id = int(environ["SLURM_JOB_ID"])
    base = int(environ.get(PORT_BASE_VARIABLE, PORT_BASE))
    names = node_names(environ["SLURM_STEP_NODELIST"])
    counts = tasks_per_node(environ["SLURM_STEP_TASKS_PER_NODE"])
    if len(counts) != len(names):
        raise ClusterError(
            f"the step has {len(names)} nodes but SLURM_STEP_TASKS_PER_NODE counts {len(counts)}"
        )
    addresses = node_addresses(names)
    nodes = [name for name, count in zip(names, counts, strict=True) for _ in range(count)]
    workers = tuple(
        f"{addresses[node]}:{task_port(job_id, r, base)}" for r, node in enumerate(nodes)
    )
    here = environ.get("SLURMD_NODENAME")
    if here and nodes[rank] != here:
        raise ClusterError(
            f"task {rank} runs on {here}, not on {nodes[rank]} as a block layout puts it; "
            "the job's srun must use --distribution=block"
        )
    return SlurmTask(rank, nodes[rank], names.index(nodes[rank]), workers)


def check_port_free(task: SlurmTask) -> None:
    """Raise ClusterError naming the port and node if any process holds this task's port."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # SO_REUSEADDR as gRPC sets it (a closed server's TIME_WAIT connections do not hold the
    # port), but not SO_REUSEPORT, which gRPC also sets: a listening holder always refuses
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        probe.bind(("", task.port))  # every address, as TensorFlow's server will
    except OSError as error:
        raise ClusterError(
            f"port {task.port} on node {task.node} ({socket.gethostname()}) is in use "
            f"({error.strerror}); task {task.rank} cannot start its TensorFlow server there "
            f"(ports: suite/running/slurm_cluster.py)"
        ) from None
    finally:
        probe.close()
