"""Run by tests/lms/tuning/test_analysis.py in a fresh process: the measured and simulated plain
peak of a small EfficientNet-like model (convolutions, batch norm, silu, depthwise convolutions),
simulated as analysed and without the two Grappler effects the analysis models (pruned ops,
x * 1), with the temporaries of the kernels this process computes with (oneDNN's or Eigen's,
lms/graph/kernels.py)."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from _lms_measure import measured_peak  # noqa: E402
from lms_cases import Case  # noqa: E402

import lms  # noqa: E402
from lms.graph import reader as lms_graph  # noqa: E402
from lms.graph.cpu_host import cpu_kernels  # noqa: E402


def silu_case(resolution=96, batch=4):
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
    x = keras.layers.Conv2D(32, 3, strides=2, padding="same", use_bias=False)(inputs)
    for width in (32, 64, 64):
        x = keras.layers.Activation("silu")(keras.layers.BatchNormalization()(x))
        x = keras.layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
        x = keras.layers.Activation("silu")(keras.layers.BatchNormalization()(x))
        x = keras.layers.Conv2D(width, 1, use_bias=False)(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(x))
    images = tf.random.stateless_uniform((batch, resolution, resolution, 3), seed=(1, 2))
    labels = tf.random.stateless_uniform((batch,), (3, 4), maxval=10, dtype=tf.int32)

    def loss_fn(y, p):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True))

    return Case(model, loss_fn, images, labels)


def main() -> None:
    case = silu_case()
    measured = measured_peak(case.step, case)
    graph = case.step.get_concrete_function(case.images, case.labels).graph
    kernels = cpu_kernels()
    analysis = lms.internal.analyze(graph, quiet=True)
    analysis.kernels = kernels
    simulated = lms.internal.simulate(analysis, None, lms.internal.BestFitAllocator).peak_bytes
    lms_graph.mark_pruned = lambda *args: None
    lms_graph.identity_input = lambda op: -1
    naive = lms.internal.analyze(graph, quiet=True)
    naive.kernels = kernels
    print(
        json.dumps(
            {
                "measured": measured,
                "simulated": simulated,
                "simulated_naive": lms.internal.simulate(
                    naive, None, lms.internal.BestFitAllocator
                ).peak_bytes,
                "pruned_ops": sum(not op.runs for op in analysis.ops),
                "aliasing_ops": sum(op.aliases >= 0 for op in analysis.ops),
                "kernels": kernels,
            }
        )
    )


if __name__ == "__main__":
    main()
