"""Benchmark: where the emulated device's swap time goes, for issue 43 (groundwork).

On the emulated device (a CPU with a memory budget) every swap goes through the host store
(lms/device/host_store.py): a swap-out is a `tf.numpy_function` callback that copies the tensor
into a host array, a swap-in a callback that hands it back and a DeepCopy into the allocator;
plans may also enforce an op order (`ordering=1`). An MLP-Mixer with everything swapped ran at
80-160 MB/s of effective swapping on a machine whose memcpy runs at ~10 GB/s, so the cost looks
like the mechanism, not the bytes. This measures the parts in one process (the trials' allocator,
`TF_CPU_ALLOCATOR_USE_BFC`), after warm-up, in interleaved rounds (each configuration once per
round) on a deep MLP outside the suite: the plain step; LMS with a generous budget (no swaps);
the plan that swaps the most (`lms.tuning.tuner.floor_parameters`) in TensorFlow's own order
(`ordering=0`) and in the enforced order (`ordering=1`). Beside them, in the same run: a raw
numpy copy of the bytes the swaps move (memcpy here), and a bare `tf.numpy_function` identity
call on a tiny tensor (the per-callback overhead), so the cost per swap can be split into
callbacks, copies and the enforced order.

    python benchmarks/swap_overhead.py [--rounds 5] [--steps 5] [--layers 24] [--width 1024]
        [--batch 512]
"""

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.environment import TRIAL_ENVIRONMENT  # noqa: E402

for _name, _value in TRIAL_ENVIRONMENT.items():  # before TensorFlow is imported
    os.environ.setdefault(_name, _value)

MiB = 2**20
GENEROUS = "16GiB"


def build(layers: int, width: int, batch: int):
    """A deep MLP's training step (many mid-size activations: batch x width floats each)."""
    import keras
    import tensorflow as tf

    from suite.workloads import training

    keras.utils.set_random_seed(0)
    inputs = keras.Input((width,), batch_size=batch)
    x = inputs
    for _ in range(layers):
        x = keras.layers.Dense(width, activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))

    def loss_fn(y, p):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True))

    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    images = tf.random.uniform((batch, width))
    labels = tf.random.uniform((batch,), maxval=10, dtype=tf.int32)
    return step, images, labels


def configurations(step):
    import lms
    from lms.tuning.tuner import floor_parameters

    functions = {"plain": step}
    functions["LMS, no swaps"] = lms.LMS(GENEROUS, swapout_threshold=10**9).wrap(step)
    for ordering in (0, 1):
        floor = floor_parameters(lms.Options(GENEROUS, ordering=ordering).parameters).as_dict()
        name = f"everything swapped, ordering={ordering}"
        functions[name] = lms.LMS(GENEROUS, **floor).wrap(step)
    return functions


def callback_seconds(calls: int = 400) -> float:
    """Seconds per bare `tf.numpy_function` identity call on a 4-float tensor, in a chain of
    `calls` inside one tf.function (median of 5)."""
    import tensorflow as tf

    @tf.function
    def chain(x):
        for _ in range(calls):
            x = tf.numpy_function(lambda a: a, [x], tf.float32, stateful=True)
            x.set_shape([4])
        return x

    tiny = tf.zeros([4])
    chain(tiny).numpy()
    times = []
    for _ in range(5):
        started = time.perf_counter()
        chain(tiny).numpy()
        times.append((time.perf_counter() - started) / calls)
    return statistics.median(times)


def copy_seconds(count: int, nbytes: int, fresh: bool) -> float:
    """Seconds for `count` numpy copies of `nbytes` each into fresh aligned arrays, as the
    host store's swap-out makes them (`fresh`), or into one array allocated once (median of 5)."""
    import numpy as np

    from lms.device.host_arrays import aligned_copy

    source = np.random.default_rng(0).random(max(1, nbytes // 4), dtype=np.float32)
    target, times, kept = np.empty_like(source), [], []
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(count):
            kept.append(aligned_copy(source)) if fresh else np.copyto(target, source)
        times.append(time.perf_counter() - started)
        kept.clear()
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=5, help="steps per configuration and round")
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--width", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=512)
    args = parser.parse_args()
    from tabulate import tabulate

    step, images, labels = build(args.layers, args.width, args.batch)
    functions = configurations(step)
    for function in functions.values():  # plan, compile and warm up every configuration
        for _ in range(3):
            float(function(images, labels))
    seconds = {name: [] for name in functions}
    for function in functions.values():
        if hasattr(function, "reset_traffic"):
            function.reset_traffic()
    for number in range(args.rounds):
        for name, function in functions.items():
            started = time.perf_counter()
            for _ in range(args.steps):
                float(function(images, labels))
            seconds[name].append((time.perf_counter() - started) / args.steps)
        print(f"round {number + 1} of {args.rounds}", file=sys.stderr, flush=True)
    plain = statistics.median(seconds["plain"])
    rows, floor = [], {}
    for name, function in functions.items():
        median = statistics.median(seconds[name])
        traffic = function.traffic() if hasattr(function, "traffic") else None
        swaps = traffic.swap_outs_per_step if traffic else 0
        moved = (traffic.out_bytes_per_step + traffic.in_bytes_per_step) if traffic else 0
        extra = median - plain
        if swaps:
            floor[name] = (median, swaps, traffic.swap_ins_per_step, moved)
        rows.append(
            [
                name,
                f"{median:.3f} ({min(seconds[name]):.3f}-{max(seconds[name]):.3f})",
                f"{plain / median:.2f}",
                f"{swaps:.0f} / {traffic.swap_ins_per_step:.0f}" if traffic else "-",
                f"{moved / MiB:.0f}" if traffic else "-",
                f"{1e3 * extra / swaps:.2f}" if swaps else "-",
                f"{moved / 1e6 / extra:.0f}" if swaps and extra > 0 else "-",
            ]
        )
    headers = [
        "configuration",
        "s/step median (min-max)",
        "plain / this",
        "swap-outs / ins per step",
        "MiB moved per step (out+in)",
        "ms per swap-out over plain",
        "effective MB/s",
    ]
    print(f"Deep MLP {args.layers} x {args.width}, batch {args.batch}, {args.rounds} rounds:")
    print(tabulate(rows, headers, tablefmt="github"))
    if not floor:
        return
    median, outs, ins, moved = floor["everything swapped, ordering=0"]
    callback = callback_seconds()
    size = int(moved / (outs + ins))  # a swap's mean bytes
    copies = copy_seconds(int(outs + ins), size, True)  # swap-outs' copies + swap-ins' DeepCopy
    reused = copy_seconds(int(outs + ins), size, False)
    ordered = floor["everything swapped, ordering=1"][0]
    parts = [
        ["bare numpy_function call (ms)", f"{1e3 * callback:.3f}"],
        ["memcpy GB/s, into fresh aligned arrays", f"{moved / 1e9 / copies:.1f}"],
        ["memcpy GB/s, into one array allocated once", f"{moved / 1e9 / reused:.1f}"],
        ["ordering=0 over plain (s/step)", f"{median - plain:.3f}"],
        [f"  callbacks: {outs + ins:.0f} x bare call (s/step)", f"{(outs + ins) * callback:.3f}"],
        ["  copies: out+in bytes into fresh arrays (s/step)", f"{copies:.3f}"],
        ["  rest (< 0: overlapped)", f"{median - plain - (outs + ins) * callback - copies:.3f}"],
        ["enforced order: ordering=1 over ordering=0 (s/step)", f"{ordered - median:.3f}"],
    ]
    print(tabulate(parts, ["part", "measured"], tablefmt="github"))


if __name__ == "__main__":
    main()
