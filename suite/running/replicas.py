"""A data-parallel trial on one node: one worker process per device, joined by TensorFlow's
MultiWorkerMirroredStrategy over 127.0.0.1.

Why one process per device (MultiWorkerMirroredStrategy) rather than MirroredStrategy in one
process: it is how the seeds ran (IBM DDL and Horovod: a process per GPU); the same worker code
spans nodes, where Slurm starts the processes instead of this launcher; and on a CPU machine N
processes are N real devices of the emulated kind, each with its own allocator (so a memory
budget is per replica, as a GPU's memory is) and its own LMS host store. MirroredStrategy would
see one CPU device.

The launcher is the trial process `suite.running.trial` started: it picks free loopback ports,
starts the workers (`SUITE_WORKER_INDEX`, `TF_CONFIG`), waits for all of them, and writes one
result: worker 0's metrics, the worst outcome of any worker, and each worker's summary.
"""

import dataclasses
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from suite.records import Metrics, Placement, TrialResult, WorkerSummary, read_result

WORKER_INDEX = "SUITE_WORKER_INDEX"
SEVERITY = ("ok", "out_of_memory", "timed_out", "crashed")  # the worst of the workers wins


def free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 free right now (bound to port 0, then released)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def tf_config(workers: list[str] | tuple[str, ...], index: int) -> str:
    """TensorFlow's cluster description: the workers' "address:port" and this one's index."""
    return json.dumps(
        {"cluster": {"worker": list(workers)}, "task": {"type": "worker", "index": index}}
    )


def placement(environ=os.environ) -> Placement:
    """Where this process runs: the host name, under Slurm the node, and for a replica worker
    its TensorFlow server's address (from TF_CONFIG, which both launchers write)."""
    address = None
    try:
        config = json.loads(environ["TF_CONFIG"])
        address = config["cluster"]["worker"][config["task"]["index"]]
    except (KeyError, ValueError, IndexError, TypeError):  # not a worker (or not our TF_CONFIG)
        pass
    node_id = environ.get("SLURM_NODEID")
    return Placement(
        socket.gethostname(),
        environ.get("SLURMD_NODENAME"),
        None if node_id is None else int(node_id),
        address,
    )


def under_slurm() -> bool:
    """Whether Slurm started this process as one task of several (`srun` in a trial's job)."""
    return int(os.environ.get("SLURM_STEP_NUM_TASKS", "1")) > 1 and "SLURM_PROCID" in os.environ


def worker_index() -> int | None:
    """This process's worker index when a launcher or Slurm started it as one, else None."""
    if under_slurm():
        return int(os.environ["SLURM_PROCID"])
    value = os.environ.get(WORKER_INDEX)
    return None if value is None else int(value)


def missing_devices(gpus: int, emulated: bool) -> str | None:
    """Why this node cannot run `gpus` workers, or None. A node with fewer GPUs cannot; a node
    without any runs them as CPU workers only for an emulated-device trial (a memory budget):
    a seed's 4-GPU study is not meant to crawl on a CPU."""
    import tensorflow as tf

    here = len(tf.config.list_physical_devices("GPU"))
    if here >= gpus or (here == 0 and emulated):
        return None
    return f"needs {gpus} GPUs per node; this host has {here or 'none'}"


def launch(params_path: str, result_path: str, replicas: int) -> TrialResult:
    """Run `replicas` workers of the trial in `params_path`; return the merged result."""
    ports = free_ports(replicas)
    processes, results = [], []
    for index in range(replicas):
        workers = [f"127.0.0.1:{port}" for port in ports]
        env = {**os.environ, WORKER_INDEX: str(index), "TF_CONFIG": tf_config(workers, index)}
        worker_result = f"{result_path}.worker{index}"
        results.append(Path(worker_result))
        command = [sys.executable, "-m", "suite.running.trial_worker", params_path, worker_result]
        processes.append(subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL))
    codes = [p.wait() for p in processes]
    return merge([read_result(r) for r in results], codes)


def _worker_name(index: int, summary: WorkerSummary) -> str:
    where = summary.placement
    return f"worker {index} on {where.node}" if where and where.node else f"worker {index}"


def merge(results: list[TrialResult | None], codes: list[int | None]) -> TrialResult:
    """One trial result from its workers': worker 0's metrics and device, the worst outcome,
    every worker's error, and `workers` (each one's outcome, median step time, peak, loss)."""
    summaries = []
    for result, code in zip(results, codes, strict=True):
        if result is None:
            # under Slurm a task's own exit code is not known (None): the job's is not its
            error = f"exited with code {code} without a result" if code is not None else None
            error = error or "left no result"
            result = TrialResult("crashed", error=error)
        metrics = result.metrics or Metrics()
        median = metrics.step_time_s.median if metrics.step_time_s else None
        summaries.append(
            WorkerSummary(
                result.outcome,
                result.error,
                median,
                metrics.peak_memory_bytes,
                metrics.final_loss,
                metrics.placement,
            )
        )
    worst = max(summaries, key=lambda s: SEVERITY.index(s.outcome))
    first = results[0]
    # worker 0's metrics; every worker's summary even when worker 0 left no result
    metrics = (first and first.metrics) or Metrics()
    metrics = dataclasses.replace(metrics, workers=tuple(summaries))
    # a worker's own account first; those that left none (killed when another failed) last
    own = [i for i, r in enumerate(results) if r is not None and summaries[i].error]
    left_none = [i for i, r in enumerate(results) if r is None]
    errors = [f"{_worker_name(i, summaries[i])}: {summaries[i].error}" for i in own + left_none]
    error = "; ".join(errors)[:4000] if errors else None
    return TrialResult(worst.outcome, metrics, error, first.device if first else None)
