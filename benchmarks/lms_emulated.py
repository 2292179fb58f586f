"""Benchmark LMS on the emulated device: simulator error, measured peak drop, throughput cost.

For each case (the suite's workloads at smoke sizes, and keras.applications models the suite does
not use), a fresh process measures the allocator peak of the plain step, then plans LMS for a
budget of `--fraction` of the simulated peak without LMS (or 1.1 x the lowest peak swapping can
reach, if higher), and measures the rewritten step. Prints
the simulated vs measured peaks (error in %), the measured drop, and images/sec with / without.

    python benchmarks/lms_emulated.py [--fraction 0.6] [--steps 5] [--case NAME ...]
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from outside_models import OUTSIDE  # noqa: E402

CASES = {
    "googlenet": ("suite", "googlenet", 224, 4),
    "deeplabv3plus": ("suite", "deeplabv3plus", 128, 2),
    "resnet50": ("suite", "resnet50", 224, 4),
    "unet3d": ("suite", "unet3d", 32, 1),
    "mobilenetv2": ("applications", "MobileNetV2", 160, 4),
    "densenet121": ("applications", "DenseNet121", 128, 2),
    "vgg16": ("applications", "VGG16", 128, 2),
    "convnexttiny": ("applications", "ConvNeXtTiny", 128, 4),
    "efficientnetb0": ("applications", "EfficientNetB0", 224, 4),
    "nasnetmobile": ("applications", "NASNetMobile", 224, 4),
    "inceptionv3": ("applications", "InceptionV3", 160, 4),
    "xception": ("applications", "Xception", 160, 2),
    "resnet50v2": ("applications", "ResNet50V2", 160, 4),
    "transformer": ("custom", "transformer", 256, 8),
    # families not tried before issue 26: other keras.applications, attention over image patches,
    # an encoder-decoder with cross-attention, a 2D encoder-decoder CNN, recurrence (While loops)
    "mobilenetv3small": ("applications", "MobileNetV3Small", 160, 4),
    "efficientnetv2b0": ("applications", "EfficientNetV2B0", 160, 4),
    "vit": ("custom", "vit", 96, 4),
    "seq2seq": ("custom", "seq2seq", 128, 8),
    "unet2d": ("custom", "unet2d", 128, 4),
    "lstm": ("custom", "lstm", 128, 8),
    # issue 43's models (benchmarks/outside_models.py)
    "wavenet": ("custom", "wavenet", 16000, 4),
    "fanout": ("custom", "fanout", 128, 4),
    "gru": ("custom", "gru", 256, 32),
    "c3d": ("custom", "c3d", 112, 2),
    "mixer": ("custom", "mixer", 224, 8),
}


def _pre_norm_block(x, width: int, heads: int, hidden: int, activation: str, memory=None):
    """A pre-norm Transformer block: self-attention, cross-attention to `memory` when given,
    then a feed-forward layer of `hidden` units, each added to its input."""
    import keras

    y = keras.layers.LayerNormalization()(x)
    x = x + keras.layers.MultiHeadAttention(heads, width // heads)(y, y)
    if memory is not None:
        y = keras.layers.LayerNormalization()(x)
        x = x + keras.layers.MultiHeadAttention(heads, width // heads)(y, memory)
    y = keras.layers.LayerNormalization()(x)
    y = keras.layers.Dense(hidden, activation=activation)(y)
    return x + keras.layers.Dense(width)(y)


def transformer_classifier(length: int, batch: int, width=256, layers=4, heads=8):
    """A pre-norm Transformer encoder over `length` tokens (written here: no model of the suite
    or of keras.applications has attention, layer norm and GELU together)."""
    import keras

    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(1000, width)(tokens)
    x = x + keras.layers.Embedding(length, width)(keras.ops.arange(length))
    for _ in range(layers):
        x = _pre_norm_block(x, width, heads, 4 * width, "gelu")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    return keras.Model(tokens, keras.layers.Dense(10)(x))


def vit_classifier(resolution: int, batch: int, patch=8, width=192, layers=4, heads=6):
    """A Vision Transformer: image patches embedded by a strided convolution, then pre-norm
    encoder blocks (attention over (resolution / patch)^2 tokens)."""
    import keras

    images = keras.Input((resolution, resolution, 3), batch_size=batch)
    x = keras.layers.Conv2D(width, patch, strides=patch)(images)
    tokens = (resolution // patch) ** 2
    x = keras.layers.Reshape((tokens, width))(x)
    x = x + keras.layers.Embedding(tokens, width)(keras.ops.arange(tokens))
    for _ in range(layers):
        x = _pre_norm_block(x, width, heads, 4 * width, "gelu")
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    return keras.Model(images, keras.layers.Dense(10)(x))


def seq2seq_classifier(length: int, batch: int, width=192, layers=3, heads=6, queries=64):
    """An encoder-decoder Transformer: an encoder over `length` tokens, a decoder of learned
    queries with self-attention and cross-attention to the encoder's output."""
    import keras

    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    memory = keras.layers.Embedding(1000, width)(tokens)
    memory = memory + keras.layers.Embedding(length, width)(keras.ops.arange(length))
    for _ in range(layers):
        memory = _pre_norm_block(memory, width, heads, 2 * width, "relu")
    x = keras.layers.Embedding(queries, width)(keras.ops.arange(queries))
    x = keras.ops.broadcast_to(x, (batch, queries, width))
    for _ in range(layers):
        x = _pre_norm_block(x, width, heads, 2 * width, "relu", memory)
    x = keras.layers.GlobalAveragePooling1D()(x)
    return keras.Model(tokens, keras.layers.Dense(10)(x))


def unet2d_classifier(resolution: int, batch: int, base=16, depth=3):
    """A 2D encoder-decoder CNN with skip connections (U-Net-like), pooled to class scores."""
    import keras

    images = keras.Input((resolution, resolution, 3), batch_size=batch)
    x, skips = images, []
    for level in range(depth):
        x = keras.layers.Conv2D(base * 2**level, 3, padding="same", activation="relu")(x)
        x = keras.layers.Conv2D(base * 2**level, 3, padding="same", activation="relu")(x)
        skips.append(x)
        x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Conv2D(base * 2**depth, 3, padding="same", activation="relu")(x)
    for level in reversed(range(depth)):
        x = keras.layers.Conv2DTranspose(base * 2**level, 2, strides=2)(x)
        x = keras.layers.Concatenate()([x, skips[level]])
        x = keras.layers.Conv2D(base * 2**level, 3, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(keras.layers.Conv2D(10, 1)(x))
    return keras.Model(images, x)


def lstm_classifier(length: int, batch: int, width=256):
    """Two stacked LSTMs over `length` tokens: on the CPU each runs as a While loop over the
    sequence, whose body holds what the backward pass needs."""
    import keras

    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(1000, width)(tokens)
    x = keras.layers.LSTM(width, return_sequences=True)(x)
    x = keras.layers.LSTM(width)(x)
    return keras.Model(tokens, keras.layers.Dense(10)(x))


# custom cases: builder, and its input's kind (outside_models.OUTSIDE's kinds)
CUSTOM = {
    "transformer": (transformer_classifier, "tokens"),
    "vit": (vit_classifier, "image"),
    "seq2seq": (seq2seq_classifier, "tokens"),
    "unet2d": (unet2d_classifier, "image"),
    "lstm": (lstm_classifier, "tokens"),
    **OUTSIDE,
}


def custom_input(kind: str, resolution: int, batch: int):
    """A random batch for a custom case: `resolution` is the sequence length, the samples, or
    the image side (a video: 16 frames of it)."""
    import tensorflow as tf

    if kind == "tokens":
        return tf.random.uniform((batch, resolution), maxval=1000, dtype=tf.int32)
    shape = {
        "audio": (batch, resolution, 1),
        "video": (batch, 16, resolution, resolution, 3),
        "image": (batch, resolution, resolution, 3),
    }[kind]
    return tf.random.uniform(shape)


def build_case(kind, name, resolution, batch):
    import keras

    from suite.workloads import WORKLOADS, build_workload, data, training

    if kind == "suite":
        model, loss_fn = build_workload(name, resolution, batch)
        info = WORKLOADS[name]
        images, labels = data.synthetic_batch(info, resolution, batch, info.default_classes)
    else:
        import tensorflow as tf

        if kind == "custom":  # resolution: the sequence length or the image side
            builder, input_kind = CUSTOM[name]
            model = builder(resolution, batch)
            images = custom_input(input_kind, resolution, batch)
        else:
            inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
            model = getattr(keras.applications, name)(weights=None, input_tensor=inputs, classes=10)
            images = tf.random.uniform((batch, resolution, resolution, 3))
        labels = tf.random.uniform((batch,), maxval=10, dtype=tf.int32)

        def loss_fn(y, p):
            return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p))

    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    return step, images, labels


def measure(function, images, labels, steps):
    """The allocator's peak over `steps` calls after a first one, and the seconds per call."""
    import tensorflow as tf

    float(function(images, labels))  # first call: tracing and one-time allocations
    tf.config.experimental.reset_memory_stats("CPU:0")
    start = time.perf_counter()
    for _ in range(steps):
        float(function(images, labels))
    seconds = time.perf_counter() - start
    return tf.config.experimental.get_memory_info("CPU:0")["peak"], seconds / steps


def child(case: str, fraction: float, steps: int, ordering: int) -> dict:
    import keras
    import tensorflow as tf

    import lms

    kind, name, resolution, batch = CASES[case]
    keras.utils.set_random_seed(0)
    step, images, labels = build_case(kind, name, resolution, batch)
    measured_plain, seconds_plain = measure(step, images, labels, steps)
    analysis = lms.internal.analyze(step.get_concrete_function(images, labels).graph)
    simulated_plain = lms.internal.simulate(analysis).peak_bytes
    # the budget: `fraction` of the plain peak, but no lower than what swapping everything
    # swappable can reach (+10 %), so every case gets a plan to measure
    everything = lms.Parameters(1, 1, 0, ordering=max(ordering, 0))
    floor = lms.internal.simulate(analysis, lms.internal.plan(analysis, everything)).peak_bytes
    budget = int(max(simulated_plain * fraction, floor * 1.1))
    planner = lms.LMS(device_memory=budget, safety_ratio=1.0, ordering=ordering)
    wrapped = planner.wrap(step)
    measured_lms, seconds_lms = measure(wrapped, images, labels, steps)
    report = planner.report
    # the largest drop: every swappable tensor swapped (threshold 1, ahead 1, groupby 0)
    from lms.device.rewriter import rewrite

    concrete = tf.function(step.python_function).get_concrete_function(images, labels)
    full = lms.internal.analyze(concrete.graph)
    full_plan = lms.internal.plan(full, everything)
    swapped_all = rewrite(concrete, full, full_plan, lms.internal.HostStore())
    measured_all, seconds_all = measure(swapped_all, images, labels, steps)
    return {
        "case": case,
        "resolution": resolution,
        "batch": batch,
        "budget": budget,
        "simulated_plain": simulated_plain,
        "measured_plain": measured_plain,
        "simulated_lms": report.peak_bytes_with_lms,
        "measured_lms": measured_lms,
        "swapped_bytes": report.swapped_bytes,
        "parameters": report.parameters,
        "ordering": report.parameters["ordering"],
        "images_per_sec_plain": batch / seconds_plain,
        "images_per_sec_lms": batch / seconds_lms,
        "vertices": report.analysis.vertices,
        "simulated_all": lms.internal.simulate(full, full_plan).peak_bytes,
        "measured_all": measured_all,
        "images_per_sec_all": batch / seconds_all,
    }


def run_json_child(script: str, arguments: list, label: str, extra_env=None) -> dict | None:
    """`script arguments` in a fresh process with the trials' environment (the emulated
    device's allocator) and `extra_env`; the JSON of its last line, or None (printed) if it
    failed."""
    from suite.environment import TRIAL_ENVIRONMENT

    env = {**os.environ, **TRIAL_ENVIRONMENT, **(extra_env or {}), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, script, *arguments]
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    if completed.returncode != 0:
        print(f"{label} failed\n{completed.stderr[-2000:]}", flush=True)
        return None
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--ordering", type=int, default=-1, choices=(-1, 0, 1))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.fraction, args.steps, args.ordering)))
        return
    from tabulate import tabulate

    from suite.environment import TRIAL_ENVIRONMENT

    env = {**os.environ, **TRIAL_ENVIRONMENT, "PYTHONPATH": str(ROOT)}
    rows, errors, drops = [], [], []
    for case in args.case or list(CASES):
        completed = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                case,
                "--fraction",
                str(args.fraction),
                "--steps",
                str(args.steps),
                "--ordering",
                str(args.ordering),
            ],
            capture_output=True,
            text=True,
            env=env,
        )
        if completed.returncode != 0:
            print(f"{case}: failed\n{completed.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(completed.stdout.strip().splitlines()[-1])
        mib = 2**20
        error_plain = (r["simulated_plain"] - r["measured_plain"]) / r["measured_plain"] * 100
        error_lms = (r["simulated_lms"] - r["measured_lms"]) / r["measured_lms"] * 100
        errors += [abs(error_plain), abs(error_lms)]
        error_all = (r["simulated_all"] - r["measured_all"]) / r["measured_all"] * 100
        errors.append(abs(error_all))
        drops.append(
            [
                case,
                f"{r['measured_plain'] / mib:.0f}",
                f"{r['simulated_all'] / mib:.0f}",
                f"{r['measured_all'] / mib:.0f}",
                f"{error_all:+.1f}",
                f"{r['measured_all'] / r['measured_plain']:.2f}",
                f"{r['images_per_sec_all'] / r['images_per_sec_plain']:.2f}",
            ]
        )
        rows.append(
            [
                case,
                f"{r['resolution']}px b{r['batch']} ordering {r['ordering']}",
                r["vertices"],
                f"{r['simulated_plain'] / mib:.0f}",
                f"{r['measured_plain'] / mib:.0f}",
                f"{error_plain:+.1f}",
                f"{r['budget'] / mib:.0f}",
                f"{r['simulated_lms'] / mib:.0f}",
                f"{r['measured_lms'] / mib:.0f}",
                f"{error_lms:+.1f}",
                f"{r['measured_lms'] / r['measured_plain']:.2f}",
                f"{r['images_per_sec_lms'] / r['images_per_sec_plain']:.2f}",
            ]
        )
        print(f"{case}: done", flush=True)
    headers = [
        "case",
        "size",
        "ops",
        "sim MiB",
        "meas MiB",
        "err %",
        "budget MiB",
        "sim LMS MiB",
        "meas LMS MiB",
        "err LMS %",
        "peak LMS/plain",
        "speed LMS/plain",
    ]
    print("Auto-tuned for the budget:")
    print(tabulate(rows, headers, tablefmt="github"))
    print("\nEverything swappable swapped (threshold 1, ahead 1, groupby 0):")
    print(
        tabulate(
            drops,
            [
                "case",
                "meas plain MiB",
                "sim all MiB",
                "meas all MiB",
                "err %",
                "peak all/plain",
                "speed all/plain",
            ],
            tablefmt="github",
        )
    )
    if errors:
        print(
            f"simulator error: median {sorted(errors)[len(errors) // 2]:.1f} %, "
            f"max {max(errors):.1f} % over {len(errors)} peaks"
        )


if __name__ == "__main__":
    main()
