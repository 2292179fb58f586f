"""The measured training loop of one trial (runs inside the trial process).

The step is a plain `tf.function` (forward, gradients, SGD-with-momentum update): the same shape of
step a user writes, and the one LMS wraps. Each step is timed alone and synchronised by reading the
loss, so per-step rates exist for the statistics; `benchmarks/trial_overhead.py` measures what that
costs against an untimed loop.
"""

import contextlib
import time
from dataclasses import dataclass, field

import tensorflow as tf

FP16_LOSS_SCALE = 128.0  # static loss scale for fp16, tf_cnn_benchmarks' default for fp16


def make_optimizer():
    import keras

    return keras.optimizers.SGD(learning_rate=0.005, momentum=0.9)


def make_train_step(model, loss_fn, optimizer, precision: str, strategy=None, global_batch=None):
    """A tf.function (images, labels) -> loss that trains `model` by one step.

    With a tf.distribute `strategy` (several replicas) each replica's loss is its batch mean
    weighted by its share of `global_batch`, so that the gradients the optimizer sums over the
    replicas are those of the global batch's mean loss, and the step returns that mean."""
    scale = FP16_LOSS_SCALE if precision == "fp16" else None
    variables = model.trainable_variables
    with strategy.scope() if strategy is not None else contextlib.nullcontext():
        optimizer.build(variables)  # its slots are replicated variables too

    def replica_step(images, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model(images, training=True))
            if strategy is not None:
                loss *= tf.cast(tf.shape(images)[0], loss.dtype) / global_batch
            scaled = loss * scale if scale else loss
        gradients = tape.gradient(scaled, variables)
        if scale:
            gradients = [g / scale for g in gradients]
        optimizer.apply_gradients(zip(gradients, variables, strict=True))
        return loss

    @tf.function
    def train_step(images, labels):
        if strategy is None:
            return replica_step(images, labels)
        losses = strategy.run(replica_step, args=(images, labels))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, losses, axis=None)

    return train_step


def memory_stats(device: str) -> dict | None:
    """The allocator's current and peak bytes on `device`, or None where it keeps no statistics
    (CPU without TF_CPU_ALLOCATOR_USE_BFC=true)."""
    try:
        return tf.config.experimental.get_memory_info(device)
    except (ValueError, tf.errors.InvalidArgumentError):
        return None


def reset_peak(device: str) -> None:
    with contextlib.suppress(ValueError, tf.errors.InvalidArgumentError):
        tf.config.experimental.reset_memory_stats(device)


@dataclass
class Measurement:
    step_seconds: list[float] = field(default_factory=list)  # timed steps only
    warmup_seconds: list[float] = field(default_factory=list)
    peak_bytes: int | None = None
    final_loss: float | None = None
    over_budget: bool = False  # stopped early: the allocator peak passed the memory budget


CALIBRATION_SIDE = 384  # a 384x384 float32 product chain: ~0.1 GFLOP per run, all cores busy


def machine_speed(device: str, seconds: float = 0.3) -> float:
    """Runs per second of a fixed chain of matrix products on `device`: how fast this machine is
    at this minute. Each trial process measures it before and after its steps; the regression
    gate divides throughput by it, so that a busy machine is not taken for a slower suite."""
    import tensorflow as tf

    with tf.device(device):
        matrix = tf.random.stateless_normal((CALIBRATION_SIDE, CALIBRATION_SIDE), seed=(0, 0))

    @tf.function
    def chain(a):
        x = a
        for _ in range(8):
            x = tf.linalg.matmul(x, a) * 1e-3
        return tf.reduce_sum(x)

    with tf.device(device):
        float(chain(matrix))  # traced and warmed
        start, runs = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            float(chain(matrix))
            runs += 1
    return runs / (time.perf_counter() - start)


def measure(
    train_step,
    next_batch,
    warmup_steps: int,
    steps: int,
    device: str,
    budget_bytes: int | None = None,
    on_step=None,
    wait_for_loop: bool = True,
) -> Measurement:
    """Run warm-up then timed steps; stop early once the measured peak exceeds `budget_bytes`.

    An LMS step (`lms.LMSFunction`) checks its plan by measuring its first steps and plans
    again when one overruns (the closed loop, lms/calibration.py). While it measures, a peak
    over the budget is the loop's to correct, not the trial's end; a step after which it
    re-planned does not count (its time and peak belong to the plan it replaced: the peak is
    reset and timed steps start again), so the trial's times and peak are those of the plan
    that held. Until the loop accepts a plan its steps are warm-up, past the trial's own.
    `wait_for_loop=False` (data-parallel workers, which must all run as many steps while each
    worker's loop may take a different number) runs exactly the trial's steps instead."""
    result = Measurement()
    reset_peak(device)
    index, loop_steps = 0, 0
    while index < warmup_steps + steps:
        calibrating, plans = _calibrating(train_step), _plans(train_step)
        start = time.perf_counter()
        images, labels = next_batch()
        result.final_loss = float(train_step(images, labels))  # reading the loss synchronises
        elapsed = time.perf_counter() - start
        # the loop starts measuring on the step's first call, and may still be measuring after
        still_calibrating = _calibrating(train_step)
        calibrating = calibrating or still_calibrating
        if wait_for_loop and plans and _plans(train_step) != plans:  # the loop re-planned
            result.warmup_seconds.append(elapsed)
            result.step_seconds.clear()
            index = min(index, warmup_steps)
            reset_peak(device)
            if index == warmup_steps:
                _reset_traffic(train_step)
            continue
        stats = memory_stats(device)
        if stats is not None:
            result.peak_bytes = int(stats["peak"])
        over = budget_bytes is not None and result.peak_bytes and result.peak_bytes > budget_bytes
        if over and (not calibrating or loop_steps >= MAX_LOOP_STEPS):
            result.over_budget = True
            break
        waiting = wait_for_loop and loop_steps < MAX_LOOP_STEPS
        if waiting and index >= warmup_steps and still_calibrating:
            # the loop has not accepted its plan yet: its steps are warm-up, however few the
            # trial asked for (a plan that held for one step is not a plan that holds)
            result.warmup_seconds.append(elapsed)
            loop_steps += 1
            _reset_traffic(train_step)
            continue
        (result.warmup_seconds if index < warmup_steps else result.step_seconds).append(elapsed)
        index += 1
        if index == warmup_steps:
            _reset_traffic(train_step)
        if on_step:
            on_step(index - 1, elapsed)
    return result


# Steps past the trial's warm-up that the closed loop may take to accept a plan: one unmeasured
# and three measured steps per plan, for the first plan, three corrections and the floor plan.
MAX_LOOP_STEPS = 24


def _plans(train_step) -> int:
    """How many plans an LMS step has made so far (0 for a plain step)."""
    return int(getattr(train_step, "plans", 0))


def _calibrating(train_step) -> bool:
    """Whether an LMS step's closed loop is still measuring its plan (False for a plain step)."""
    return bool(getattr(train_step, "calibrating", False))


def _reset_traffic(train_step) -> None:
    """Count an LMS step's swap traffic over the timed steps only."""
    reset = getattr(train_step, "reset_traffic", None)
    if reset is not None:
        reset()
