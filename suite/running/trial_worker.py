"""One trial's process: `python -m suite.running.trial_worker PARAMS.json RESULT.json`.

Builds the workload, measures it, writes the result as JSON (atomically), exits 0. An out-of-memory
(a real one from the allocator, or a measured peak above the trial's memory budget on the emulated
device) is a result; any other exception is written as a crashed result and exits 1. A process
that dies without writing a result is classified by the parent (`suite.running.trial`).
"""

import json
import sys
import time
import traceback
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from suite.specs.model import TrialParams


def _write_json(path: str, payload: dict) -> None:
    from suite.records import write_atomic

    write_atomic(path, json.dumps(payload))


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(params: "TrialParams") -> dict:
    import keras
    import tensorflow as tf

    import lms
    from suite import lms_seam, stats
    from suite.workloads import build_workload, data, training

    info = params.info
    keras.utils.set_random_seed(params.seed)
    device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
    resolution, batch = params.resolution, params.batch
    budget = params.memory_budget_bytes

    started = time.perf_counter()
    model, loss_fn = build_workload(info.name, resolution, batch, params.precision, params.classes)
    planner = lms_seam.make_planner(params)
    train_step = training.make_train_step(
        model, loss_fn, training.make_optimizer(), params.precision
    )
    source = params.data
    with tf.device(device):
        if source["kind"] == "synthetic":
            batch_tensors = data.synthetic_batch(
                info, resolution, batch, params.classes, params.seed
            )

            def next_batch():
                return batch_tensors
        else:
            iterator = iter(
                data.tfrecord_dataset(info, source["format"], source["path"], resolution, batch)
            )
            next_batch = iterator.__next__
    if planner is not None:  # traced, planned and rewritten on the first (warm-up) call
        train_step = planner.wrap(train_step)
    build_seconds = time.perf_counter() - started
    layer = next(layer for layer in model.layers if layer.trainable_weights)
    _log(f"built {info.name} in {build_seconds:.1f}s on {device} (computes in "
         f"{layer.compute_dtype}, variables {layer.variable_dtype})")  # fmt: skip

    total = params.warmup_steps + params.steps

    def on_step(index, seconds):
        if planner is not None and index + 1 == params.warmup_steps:
            train_step.reset_traffic()  # swap traffic of the measured steps only
        if index == 0 or (index + 1) % max(1, total // 10) == 0 or index + 1 == total:
            _log(f"step {index + 1}/{total}: {seconds:.3f}s")

    speed_before = training.machine_speed(device)
    try:
        result = training.measure(
            train_step, next_batch, params.warmup_steps, params.steps, device, budget, on_step
        )
    except lms.NothingFitsError as error:  # LMS cannot make it fit: it would not train
        return {
            "outcome": "out_of_memory",
            "device": device,
            "error": f"LMS: {error}",
            "metrics": {"peak_memory_bytes": None, "memory_budget_bytes": budget},
        }
    except tf.errors.ResourceExhaustedError as error:
        return {
            "outcome": "out_of_memory",
            "device": device,
            "error": str(error).splitlines()[0][:500],
            "metrics": {"peak_memory_bytes": None, "memory_budget_bytes": budget},
        }
    speed_after = training.machine_speed(device)
    if planner is not None and device.startswith("GPU"):  # GPU only: time the swap copies
        train_step.profile(*next_batch())
    memory = {"peak_memory_bytes": result.peak_bytes, "memory_budget_bytes": budget}
    if planner is not None:
        memory["lms"] = planner.report  # the plan beside the measured peak
        # bytes, swaps and seconds in swap ops per measured step (lms.LMSFunction.traffic)
        memory["lms_traffic"] = train_step.traffic()
    if result.over_budget:
        return {
            "outcome": "out_of_memory",
            "device": device,
            "metrics": memory,
            "error": f"measured peak {result.peak_bytes} B exceeds the memory budget "
            f"{budget} B (emulated device)",
        }
    metrics = stats.throughput_metrics(
        result.step_seconds, batch, info.elements_per_sample(resolution), info.rate_key
    )
    metrics.update(memory)
    metrics.update(
        {
            "step_times_s": result.step_seconds,
            "warmup_times_s": result.warmup_seconds,
            "build_s": build_seconds,
            "final_loss": result.final_loss,
            # runs/s of a fixed product chain before and after the steps (training.machine_speed)
            "machine_speed": {
                "before": speed_before,
                "after": speed_after,
                "mean": (speed_before + speed_after) / 2,
            },  # fmt: skip
        }
    )
    return {"outcome": "ok", "device": device, "metrics": metrics, "error": None}


def main(argv: list[str]) -> int:
    params_path, result_path = argv
    from suite.specs.model import TrialParams

    with open(params_path) as handle:
        raw = json.load(handle)
    try:
        result = run(TrialParams.from_dict(raw))
        code = 0
    except Exception as error:  # any failure of the workload is a recorded result
        traceback.print_exc()
        result = {
            "outcome": "crashed",
            "device": None,
            "metrics": None,
            "error": f"{type(error).__name__}: {error}"[:2000],
        }
        code = 1
    _write_json(result_path, result)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
