"""One trial's process: `python -m suite.running.trial_worker PARAMS.json RESULT.json
[--parent PID]`.

PARAMS.json holds the trial's canonical parameters (`TrialParams.to_dict`) and, when the host
lends LMS a disk (`inv run --host-disk`), `host_disk`: a directory of the host, not a parameter
of the trial, so never part of its hash (`params_text`). An LMS trial on the emulated device
keeps there the host arrays RAM cannot hold; its record's metrics say what the disk held
(`lms_disk`). On a GPU the host arrays are TensorFlow's pinned memory, which has no disk tier:
the disk is not used.

Builds the workload, measures it, writes the result as JSON (atomically), exits 0. An out-of-memory
(a real one from the allocator, or a measured peak above the trial's memory budget on the emulated
device) is a result; any other exception is written as a crashed result and exits 1. A process
that dies without writing a result is classified by the parent (`suite.running.trial`).

`--parent PID`: the run that started this process natively (`suite.running.trial`). When that
process is gone (SIGKILL), this one removes its scratch directory (the one holding PARAMS.json)
and ends itself (`suite.running.orphan_guard`). An argument, not an environment variable, so that
a launcher's replica workers and Slurm's tasks, which start this module with two arguments, do not
inherit it.
"""

import contextlib
import json
import sys
import time
import traceback
from typing import TYPE_CHECKING

from suite.records import MachineSpeed, Metrics, Rate, StepTimes, TrialResult, write_result

if TYPE_CHECKING:
    from suite.specs.model import TrialParams


HOST_DISK = "host_disk"  # PARAMS.json's one key that is not a trial parameter


def params_text(params: "TrialParams", host_disk=None) -> str:
    """PARAMS.json for a trial process: its parameters, and the disk its host lends LMS."""
    values = params.to_dict()
    if host_disk is not None:
        values[HOST_DISK] = str(host_disk)
    return json.dumps(values)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _replica_strategy(tf, params: "TrialParams", index: int):
    """MultiWorkerMirroredStrategy for a trial of several replicas (suite/running/replicas.py
    says why), None for one. On a CPU each worker gets one thread; on a GPU host, one GPU. Its
    cluster is TF_CONFIG: written by the one-node launcher, or here from Slurm's tasks
    (suite/running/slurm_cluster.py, which also checks that this task's port is free)."""
    import os

    from suite.running.replicas import tf_config, under_slurm
    from suite.running.slurm_cluster import check_port_free, slurm_task

    if params.replicas == 1:
        return None
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        tf.config.threading.set_intra_op_parallelism_threads(1)
        tf.config.threading.set_inter_op_parallelism_threads(1)
    local = index
    if under_slurm():
        task = slurm_task()
        check_port_free(task)
        os.environ["TF_CONFIG"] = tf_config(task.workers, task.rank)
        local = int(os.environ.get("SLURM_LOCALID", "0"))
    if gpus:  # GPU only: worker i of a node computes on GPU i of the node
        tf.config.set_visible_devices(gpus[local % len(gpus)], "GPU")
    return tf.distribute.MultiWorkerMirroredStrategy()


def run(params: "TrialParams", host_disk: str | None = None) -> TrialResult:
    import keras
    import tensorflow as tf

    import lms
    from suite import lms_seam, stats
    from suite.running.machine_load import LoadMonitor
    from suite.running.replicas import placement, worker_index
    from suite.workloads import build_workload, data, training

    info = params.info
    index = worker_index() or 0
    strategy = _replica_strategy(tf, params, index)
    keras.utils.set_random_seed(params.seed)
    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
    resolution, batch = params.resolution, params.batch
    budget = params.memory_budget_bytes

    started = time.perf_counter()
    with strategy.scope() if strategy else contextlib.nullcontext():
        model, loss_fn = build_workload(
            info.name, resolution, batch, params.precision, params.classes
        )
        optimizer = training.make_optimizer()
    if host_disk is not None and params.lms and device != "CPU:0":
        _log(f"host disk {host_disk} not used: LMS on {device} keeps host arrays in pinned memory")
        host_disk = None
    planner = lms_seam.make_planner(params, host_disk=host_disk)
    train_step = training.make_train_step(
        model, loss_fn, optimizer, params.precision, strategy, params.global_batch
    )
    source = params.data
    # every replica reads the global batch and trains on its own slice of it: N replicas of
    # batch b see exactly what one replica of batch N x b sees
    mine = slice(index * batch, (index + 1) * batch)
    with tf.device(device):
        if source["kind"] == "synthetic":
            images, labels = data.synthetic_batch(
                info, resolution, params.global_batch, params.classes, params.seed
            )
            batch_tensors = (images[mine], labels[mine])

            def next_batch():
                return batch_tensors
        else:
            iterator = iter(
                data.tfrecord_dataset(
                    info, source["format"], source["path"], resolution, params.global_batch
                )
            )

            def next_batch():
                images, labels = next(iterator)
                return images[mine], labels[mine]

    if planner is not None:  # traced, planned and rewritten on the first (warm-up) call
        train_step = planner.wrap(train_step)
    build_seconds = time.perf_counter() - started
    layer = next(layer for layer in model.layers if layer.trainable_weights)
    _log(
        f"built {info.name} in {build_seconds:.1f}s on {device} (computes in "
        f"{layer.compute_dtype}, variables {layer.variable_dtype})"
    )

    total = params.warmup_steps + params.steps

    def on_step(index, seconds):
        if index == 0 or (index + 1) % max(1, total // 10) == 0 or index + 1 == total:
            _log(f"step {index + 1}/{total}: {seconds:.3f}s")

    speed_before = training.machine_speed(device)
    load = LoadMonitor()  # what other processes took of the cores while the steps ran

    def ended(outcome: str, error: str | None = None, **measured) -> TrialResult:
        """The one place a result is built: the memory budget and the machine's load always,
        and what the host's disk held when LMS was lent one."""
        metrics = Metrics(
            memory_budget_bytes=budget,
            machine_load=load.summary(),
            placement=placement(),
            lms_disk=planner.disk_usage() if planner is not None else None,
            **measured,
        )
        return TrialResult(outcome, metrics, error, device)

    try:
        with load:
            result = training.measure(
                train_step,
                next_batch,
                params.warmup_steps,
                params.steps,
                device,
                budget,
                on_step,
                wait_for_loop=params.replicas == 1,  # workers must all run as many steps
            )
    except (lms.NothingFitsError, lms.HostMemoryError) as error:  # it would not train here
        return ended("out_of_memory", f"LMS: {error}")
    except tf.errors.ResourceExhaustedError as error:
        return ended("out_of_memory", str(error).splitlines()[0][:500])
    speed_after = training.machine_speed(device)
    if planner is not None and device.startswith("GPU"):  # GPU only: time the swap copies
        train_step.profile(*next_batch())
    # the plan beside the measured peak, and the bytes, swaps and seconds in swap ops per
    # measured step (lms.LMSFunction.traffic)
    plan = (
        {} if planner is None else {"lms_plan": planner.report, "lms_traffic": train_step.traffic()}
    )
    if result.over_budget:
        error = (
            f"measured peak {result.peak_bytes} B exceeds the memory budget {budget} B "
            "(emulated device)"
        )
        return ended("out_of_memory", error, peak_memory_bytes=result.peak_bytes, **plan)
    rates = stats.throughput_metrics(
        result.step_seconds,
        params.global_batch,
        info.elements_per_sample(resolution),
        info.rate_key,
    )
    return ended(
        "ok",
        images_per_sec=Rate(**rates["images_per_sec"]),
        **{info.rate_key: Rate(**rates[info.rate_key])},
        step_time_s=StepTimes(**rates["step_time_s"]),
        replicas=params.replicas,
        nodes=params.nodes,
        images_per_sec_per_replica=Rate(**stats.summarize_rates(result.step_seconds, batch)),
        peak_memory_bytes=result.peak_bytes,
        **plan,
        step_times_s=tuple(result.step_seconds),
        warmup_times_s=tuple(result.warmup_seconds),
        build_s=build_seconds,
        final_loss=result.final_loss,
        # runs/s of a fixed product chain before and after the steps (training.machine_speed)
        machine_speed=MachineSpeed(speed_before, speed_after, (speed_before + speed_after) / 2),
    )


def main(argv: list[str]) -> int:
    from suite.running.orphan_guard import child_arguments

    params_path, result_path = child_arguments(
        argv, "python -m suite.running.trial_worker", "params_path", "result_path"
    )
    from suite.specs.model import TrialParams

    with open(params_path) as handle:
        raw = json.load(handle)
    try:
        host_disk = raw.pop(HOST_DISK, None) if isinstance(raw, dict) else None
        params = TrialParams.from_dict(raw)
        from suite.running.replicas import launch, missing_devices, worker_index

        if params.replicas > 1 and worker_index() is None:  # the launcher of the workers
            missing = missing_devices(params.gpus, params.memory_budget_bytes is not None)
            if missing:
                result = TrialResult("skipped", error=missing)
            else:
                result = launch(params_path, result_path, params.replicas)
        else:
            result = run(params, host_disk)
        code = 0
    except Exception as error:  # any failure of the workload is a recorded result
        traceback.print_exc()
        from suite.running.replicas import placement

        # where it crashed: a worker's error is named by its node in the merged result
        result = TrialResult(
            "crashed", Metrics(placement=placement()), f"{type(error).__name__}: {error}"[:2000]
        )
        code = 1
    write_result(result_path, result)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
