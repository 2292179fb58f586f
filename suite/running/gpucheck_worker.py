"""One process of `inv gpucheck` (suite/running/gpucheck.py): builds the check's step, runs it,
reads what TensorFlow ran and writes what it found.

`python -m suite.running.gpucheck_worker REQUEST.json ANSWER.json [--parent PID]`: the request
names the part ("placement", "timing", "memory", "grappler", "split", "pinned"), the mode ("gpu"
or "two-device") and the part's options; the answer holds its findings (lines), its failures
(from gpucheck.py's judges), the GPU-only parts it did not run and why, and its data. A fresh
process per part: the two-device mode must split the CPU before TensorFlow runs anything, a
measured peak must hold nothing of another part's, and the pinned host cap is read when
TensorFlow starts.

The step: a small convolutional classifier trained by the suite's own step (SGD with momentum,
suite.workloads.training), its variables on the compute device (a GPU, or the two-device mode's
/CPU:1), with LMS given TFLMSv2's parameters that swap every tensor that can be swapped.
"""

import json
import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from suite.records.files import write_atomic
from suite.running import gpucheck
from suite.running.orphan_guard import child_arguments

MECHANISMS = {"gpu": "device-copy", "two-device": "two-device"}
COMPUTE = {"gpu": "/GPU:0", "two-device": "/CPU:1"}
# (side, batch, filters) of the step: seconds on two CPU cores; on a GPU ~100 MiB activations,
# so that a peak is far above the allocator's rounding
SIZES = {"two-device": (64, 8, 16), "gpu": (224, 16, 32)}
CONVOLUTIONS, CHANNELS, CLASSES = 6, 8, 10
# every tensor that can be swapped is (TFLMSv2's parameters), for a device so small that the
# parameters apply as given; no closed loop: the step runs the plan checked
SWAP_ALL = {
    "device_memory": "1MiB",
    "swapout_threshold": 1,
    "swapin_ahead": 1,
    "swapin_groupby": 0,
    "split": "off",
    "calibration_steps": 0,
}
SPLIT = {"Conv2D": 4}
# Grappler's arithmetic optimizer and remapper rewrite by who reads a tensor (a swap or a piece
# is one more reader), and fused and unfused kernels round differently: off for the plain and
# the split step alike in the update check (tests/lms/conftest.py `exact_arithmetic`)
EXACT_ARITHMETIC = {"arithmetic_optimization": False, "remapping": False}


@dataclass
class Case:
    """The step of a check, its batch, and the state it starts from (restored between runs)."""

    mode: str
    model: object
    optimizer: object
    step: object  # the plain tf.function
    images: object
    labels: object
    initial: list

    def variables(self) -> list:
        return list(self.model.variables) + list(self.optimizer.variables)

    def reset(self) -> None:
        for variable, value in zip(self.variables(), self.initial, strict=True):
            variable.assign(value)

    def plain(self, images, labels):
        """The plain step, on the compute device (the two-device mode places by the call)."""
        import tensorflow as tf

        with tf.device(COMPUTE[self.mode]):
            return self.step(images, labels)

    @property
    def args(self) -> tuple:
        return self.images, self.labels


def build_case(mode: str, precision: str = "fp32") -> Case:
    import keras
    import tensorflow as tf

    from suite.workloads import precision_policy
    from suite.workloads.losses import classification
    from suite.workloads.training import make_optimizer, make_train_step

    side, batch, filters = SIZES[mode]
    keras.utils.set_random_seed(0)
    with tf.device(COMPUTE[mode]), precision_policy(precision):
        layers = [keras.Input((side, side, CHANNELS), batch_size=batch)]
        layers += [
            keras.layers.Conv2D(filters, 3, padding="same", activation="relu")
            for _ in range(CONVOLUTIONS)
        ]
        layers += [keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(CLASSES)]
        model = keras.Sequential(layers)
        optimizer = make_optimizer()
        step = make_train_step(model, classification, optimizer, precision)
        images = tf.random.stateless_uniform((batch, side, side, CHANNELS), seed=(1, 2))
        labels = tf.random.stateless_uniform((batch,), (3, 4), maxval=CLASSES, dtype=tf.int32)
    case = Case(mode, model, optimizer, step, images, labels, [])
    case.initial = [v.numpy() for v in case.variables()]
    return case


def lms_step(case: Case, **options):
    """(planner, step) of LMS with `options` on the case's step, called once (plans, runs)."""
    import lms

    planner = lms.LMS(mechanism=MECHANISMS[case.mode], **options)
    step = planner.wrap(case.step)
    step(*case.args)
    return planner, step


# why a GPU-only part cannot run on the two logical CPU devices
NO_COPY_EVENTS = "the two CPU devices' copies are memcpys, which the profiler records no events of"
NO_GPU_PASSES = "they act on GPU devices only; replayed above on a virtual GPU"


def not_run(what: str, why: str) -> str:
    return f"GPU only, no GPU here: {what} ({why})"


# --- the parts --------------------------------------------------------------------------------


def placement(mode: str) -> dict:
    """Check a: one more step of the swap-everything plan with run metadata."""
    import lms

    case = build_case(mode)
    _, step = lms_step(case, **SWAP_ALL)
    report = lms.check_step(step, *case.args)
    return {
        "findings": [report.summary()],
        "failures": gpucheck.placement_failures(report),
        "data": report.as_dict(),
    }


def timing(mode: str) -> dict:
    """Check b: a profiled step of the swap-everything plan; when each swap-in's copy started
    against when its trigger ended (lms.check_step(..., timed=True): on the CPU the host-side
    sends, on a GPU the copy events)."""
    import lms

    case = build_case(mode)
    _, step = lms_step(case, **SWAP_ALL)
    report = lms.check_step(step, *case.args, timed=True)
    timings, clock = report.timings, report.clock
    skipped = []
    if clock == "host":
        skipped = [not_run("the device timeline's host-to-device copy events", NO_COPY_EVENTS)]
    late = [t for t in timings if t.after_trigger]
    margins = [t.start - t.trigger_end for t in late]
    what = "copy events" if clock == "device" else "host-side sends"
    finding = f"{len(late)} of {len(timings)} swap-ins: {what} started after the trigger ended"
    if margins:
        finding += f" (by {min(margins) * 1e3:.3f} to {max(margins) * 1e3:.3f} ms)"
    return {
        "findings": [finding],
        "failures": gpucheck.timing_failures(timings, clock),
        "not_run": skipped,
        "data": {"clock": clock, "swap_ins": [t.__dict__ for t in timings]},
    }


def memory(mode: str, precision: str, ordering: int) -> dict:
    """Check c, GPU only: the plain and the LMS step's measured peaks (the GPU allocator's, after
    resetting its statistics) against the simulation's, for one precision and ordering."""
    case = build_case(mode, precision)
    plain_peak, plain_seconds = measured_peak(case.plain, case.args)
    options = {**SWAP_ALL, "device_memory": None, "ordering": ordering}
    import lms

    planner = lms.LMS(mechanism=MECHANISMS[mode], **options)
    step = planner.wrap(case.step)
    lms_peak, lms_seconds = measured_peak(step, case.args)
    report = planner.report
    row = {
        "precision": precision,
        "ordering": ordering,
        "plain_peak": plain_peak,
        "lms_peak": lms_peak,
        "simulated_without": report.peak_bytes_without_lms,
        "simulated_with": report.peak_bytes_with_lms,
        "swapped_bytes": report.swapped_bytes,
        "plain_seconds": plain_seconds,
        "lms_seconds": lms_seconds,
    }
    mib = 2**20
    finding = (
        f"{precision} ordering {ordering}: peak plain {plain_peak / mib:.1f} MiB -> LMS "
        f"{lms_peak / mib:.1f} MiB (simulated {row['simulated_without'] / mib:.1f} -> "
        f"{row['simulated_with'] / mib:.1f}, {report.swapped_bytes / mib:.1f} MiB swapped); "
        f"step {plain_seconds * 1e3:.1f} -> {lms_seconds * 1e3:.1f} ms"
    )
    return {"findings": [finding], "failures": gpucheck.memory_failures([row]), "data": row}


def measured_peak(call, args) -> tuple[int, float]:
    """GPU only: (peak bytes, seconds) of one step after two unmeasured ones (tracing, planning,
    cuDNN's autotuning): tf.config.experimental.get_memory_info's peak after reset_memory_stats."""
    import tensorflow as tf

    for _ in range(2):
        float(call(*args))
    tf.config.experimental.reset_memory_stats("GPU:0")
    started = time.perf_counter()
    float(call(*args))
    seconds = time.perf_counter() - started
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"]), seconds


def grappler(mode: str) -> dict:
    """Check d: Grappler replayed on a virtual GPU (half the plain step's simulated peak: a GPU
    the step does not fit) with LMS's configuration and TensorFlow's defaults, and the optimized
    graph of a real run of the LMS step."""
    import lms

    case = build_case(mode)
    planner, step = lms_step(case, **SWAP_ALL)
    callable_, _ = step.prepare(*case.args)
    memory_bytes = planner.report.peak_bytes_without_lms // 2
    replays = lms.grappler_replays(callable_.graph, memory_bytes)
    report = lms.check_step(step, *case.args)
    real = {
        "removed": report.missing,
        "grappler_swaps": list(report.grappler_swaps),
        "transposes": list(report.transposes),
    }
    findings = [
        f"replayed on a virtual GPU of {memory_bytes / 2**20:.1f} MiB, "
        + _replay_text(replays[config], label)
        for config, label in (("lms", "LMS's configuration"), ("default", "TensorFlow's defaults"))
    ]
    findings.append(
        f"as it ran ({COMPUTE[mode]}, post-optimization graph): {len(real['removed'])} of "
        f"{len(report.planned)} LMS ops removed, {len(real['grappler_swaps'])} Grappler swap ops, "
        f"{len(real['transposes'])} layout transposes"
    )
    skipped = []
    if mode != "gpu":
        skipped.append(
            not_run(
                "Grappler's layout optimizer and memory optimizer's swapping in a real run",
                NO_GPU_PASSES,
            )
        )
    return {
        "findings": findings,
        "failures": gpucheck.replay_failures(replays, real),
        "not_run": skipped,
        "data": {"memory_bytes": memory_bytes, "replay": replays, "real": real},
    }


def _replay_text(replay: dict, label: str) -> str:
    return (
        f"{label}: {len(replay['removed'])} of {replay['lms_ops']} LMS ops removed (dependency "
        f"optimizer), {len(replay['grappler_swaps'])} swap ops (memory optimizer), "
        f"{len(replay['transposes'])} transposes and {replay['nchw_convolutions']} NCHW "
        "convolutions (layout optimizer)"
    )


def split(mode: str) -> dict:
    """Check e: every Conv2D in 4 pieces; one step's loss and updates against the plain step's,
    the pieces' placement, and on a GPU the bytes the copy events moved against the plan's."""
    import tensorflow as tf

    import lms

    tf.config.optimizer.set_experimental_options(EXACT_ARITHMETIC)
    if mode == "gpu":  # GPU only: cuDNN's autotuning and TF32 would differ between the runs
        tf.config.experimental.enable_op_determinism()
        tf.config.experimental.enable_tensor_float_32_execution(False)
    case = build_case(mode)
    plain_loss, plain_updates = step_update(case, case.plain)
    planner = lms.LMS(
        mechanism=MECHANISMS[mode], device_memory=_ample(mode), split=SPLIT, calibration_steps=0
    )
    step = planner.wrap(case.step)
    loss, updates = step_update(case, step)
    report = planner.report
    found = {
        "splits": [dict(s) for s in report.splits or ()],
        "loss": loss,
        "plain_loss": plain_loss,
        "loss_relative": abs(loss - plain_loss) / max(abs(plain_loss), 1e-30),
        "variables": len(updates),
    }
    found["mismatched"], found["largest_relative"] = mismatches(updates, plain_updates, case)
    placement = lms.check_step(step, *case.args)
    failures = gpucheck.update_failures(found) + gpucheck.placement_failures(placement)
    findings = [
        f"{len(found['splits'])} Conv2D split in {SPLIT['Conv2D']} pieces: loss {loss:.7g} vs "
        f"plain {plain_loss:.7g}, {found['variables'] - len(found['mismatched'])} of "
        f"{found['variables']} variables' updates within {gpucheck.EXPECT['update_rtol']:g} "
        f"(largest difference {found['largest_relative']:.2g} relative)",
        placement.summary(),
    ]
    skipped = []
    if mode == "gpu":
        copied = sum(n for _, n, _ in lms.profile_copies(step, *case.args).values())
        planned = planned_copy_bytes(report)
        found.update(copied_bytes=copied, planned_bytes=planned)
        findings.append(
            f"copy events moved {copied / 2**20:.1f} MiB, the plan {planned / 2**20:.1f} MiB"
        )
        failures += gpucheck.copy_bytes_failures(planned, copied)
    else:
        skipped.append(not_run("the bytes the pieces move, from the copy events", NO_COPY_EVENTS))
    found["placement"] = placement.as_dict()
    return {"findings": findings, "failures": failures, "not_run": skipped, "data": found}


def _ample(mode: str) -> str | None:
    """A device memory the split step fits without swaps: the GPU's own; 64 GiB for the two
    logical CPU devices (they have no memory of their own to plan for)."""
    return None if mode == "gpu" else "64GiB"


def planned_copy_bytes(report) -> int:
    """GPU only: what a plan copies between host and device per step: its swaps each way and,
    per split op, its inputs and outputs out and back (desk check S3: about 2 x (I + O))."""
    pieces = sum(2 * s["bytes"] for s in report.splits or ())
    return report.swapped_bytes + report.swapped_in_bytes + pieces


def step_update(case: Case, call) -> tuple[float, list]:
    """The loss and every trainable variable's update of one step from the initial state, on
    the call's second run (its first plans and rewrites): the optimizer's momentum after one
    step is -learning_rate x the gradient it applied, in full precision (tests/support/
    lms_cases.py `step_update`)."""
    import numpy as np

    case.reset()
    call(*case.args)
    case.reset()
    loss = float(call(*case.args))
    return loss, [m.numpy().astype(np.float64) for m in case.optimizer.momentums]


def mismatches(got: list, want: list, case: Case) -> tuple[list, float]:
    """([(variable, relative difference)] of the updates that differ by more than `update_rtol`
    of their own size plus `update_floor` of the whole step's (rounding of near-zero updates),
    the largest relative difference of all)."""
    import numpy as np

    rtol, floor = gpucheck.EXPECT["update_rtol"], gpucheck.EXPECT["update_floor"]
    total = math.sqrt(sum(float(np.sum(w * w)) for w in want))
    names = [v.name for v in case.model.trainable_variables]
    found, largest = [], 0.0
    for name, g, w in zip(names, got, want, strict=True):
        difference, size = float(np.linalg.norm(g - w)), float(np.linalg.norm(w))
        largest = max(largest, difference / max(size, 1e-30))
        if difference > rtol * size + floor * total:
            found.append((name, difference / max(size, 1e-30)))
    return found, largest


def pinned(mode: str) -> dict:
    """Check e, second part (TF_GPU_HOST_MEM_LIMIT_IN_MB=1 in this process's environment): the
    split step, whose host arrays need more than 1 MiB, must end in lms.HostMemoryError on its
    first call, with the closed loop on (as a user runs it), not in a re-plan."""
    import lms

    case = build_case(mode)
    planner = lms.LMS(mechanism=MECHANISMS[mode], device_memory=_ample(mode), split=SPLIT)
    step = planner.wrap(case.step)
    found = {"raised": None, "message": None}
    try:
        step(*case.args)
    except lms.HostMemoryError as error:
        found.update(
            raised="HostMemoryError", message=str(error), need=error.need, cap=error.available
        )
    except Exception as error:  # anything else is what the check reports
        found.update(raised=type(error).__name__, message=str(error).splitlines()[0][:300])
    found["plans"] = step.plans  # made and kept: 0 when the plan was refused before the step
    failures = gpucheck.pinned_failures(found)
    finding = (
        f"pinned host cap 1 MiB: {found['raised'] or 'no error'} on the first call, "
        f"{max(found['plans'] - 1, 0)} re-plans"
    )
    if found["raised"] == "HostMemoryError":
        finding += (
            f" (the plan needs {found['need'] / 2**20:.1f} MiB of host memory, the cap allows "
            f"{found['cap'] / 2**20:.1f} MiB; its message says how to raise it)"
        )
    elif found["message"]:
        finding += f": {found['message'][:150]}"
    return {"findings": [finding], "failures": failures, "data": found}


PARTS = {
    "placement": placement,
    "timing": timing,
    "memory": memory,
    "grappler": grappler,
    "split": split,
    "pinned": pinned,
}


def main(argv: list[str]) -> int:
    request_path, answer_path = child_arguments(
        argv, "python -m suite.running.gpucheck_worker", "request_path", "answer_path"
    )
    request = json.loads(Path(request_path).read_text())
    mode = request["mode"]
    import lms

    if mode == "two-device":
        lms.use_two_devices()  # before TensorFlow runs anything
    import tensorflow as tf

    started = time.perf_counter()
    if mode == "gpu" and not tf.config.list_physical_devices("GPU"):
        answer = {
            "fatal": "--mode gpu: TensorFlow sees no GPU (a CPU build of TensorFlow, or "
            "CUDA_VISIBLE_DEVICES hides it); install the CUDA build (bash scripts/venv.sh .venv "
            "gpu) or run --mode two-device"
        }
    else:
        options = {k: v for k, v in request.items() if k not in ("check", "part", "mode")}
        answer = PARTS[request["part"]](mode, **options)
    answer.update(tensorflow_version=tf.__version__, seconds=time.perf_counter() - started)
    write_atomic(answer_path, json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
