"""Child of test_loops.py and test_lists.py: stacked Keras LSTMs (each a While loop over the
sequence on the CPU), their step analysed, simulated and measured in this fresh process, without
LMS or with it.

Usage: _lstm_step.py LENGTH BATCH [LAYERS WIDTH [DEVICE_MEMORY | serial [lstm | gru]]]. Without
DEVICE_MEMORY
(bytes) the plain step: prints one JSON line with the loops the analysis saw, the simulated and
the measured peak; `serial`: the same with its loops run one iteration at a time, as LMS runs
them (the plain step rewritten with no swap). With DEVICE_MEMORY, the step wrapped by LMS for
that device memory (no calibration: the plan as simulated): the plan's simulated peak, the
measured one, how many tensor lists it swaps and streams (lms/device/list_streams.py).
Needs TF_CPU_ALLOCATOR_USE_BFC=true.
"""

import json
import sys

import keras
import tensorflow as tf

import lms
from lms.device.rewriter import rewrite
from lms.graph.cpu_host import cpu_kernels
from lms.planning.planner import Plan


def lstm_step(length: int, batch: int, width: int = 256, layers: int = 2, cell: str = "lstm"):
    """Stacked LSTMs (GRUs with `cell` "gru") over `length` tokens, ten classes."""
    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(1000, width)(tokens)
    layer_of = keras.layers.GRU if cell == "gru" else keras.layers.LSTM
    for layer in range(layers):
        x = layer_of(width, return_sequences=layer < layers - 1)(x)
    model = keras.Model(tokens, keras.layers.Dense(10)(x))
    optimizer = keras.optimizers.SGD(1e-3)

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x)
            loss = tf.reduce_mean(
                keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            )
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    x = tf.random.stateless_uniform((batch, length), (0, 1), 0, 1000, dtype=tf.int32)
    return step, x, tf.zeros((batch,), tf.int32)


def measured_peak(step, x, y) -> int:
    float(step(x, y))
    tf.config.experimental.reset_memory_stats("CPU:0")
    for _ in range(2):
        float(step(x, y))
    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


def plain(step, x, y, serial: bool = False) -> dict:
    concrete = step.get_concrete_function(x, y)
    analysis = lms.internal.analyze(concrete.graph)
    analysis.kernels = cpu_kernels()
    simulated = lms.internal.simulate(analysis).peak_bytes
    if serial:  # no swap: the rewrite only runs the loops one iteration at a time
        nothing = Plan(lms.Parameters(), [], frozenset())
        step = rewrite(concrete, analysis, nothing, lms.internal.HostStore())
    return {"loops": analysis.loops, "simulated": simulated, "measured": measured_peak(step, x, y)}


def with_lms(step, x, y, device_memory: int) -> dict:
    planner = lms.LMS(device_memory=device_memory, calibration_steps=0)
    wrapped = planner.wrap(step)
    measured = measured_peak(wrapped, x, y)
    report = planner.report
    return {
        "simulated": report.peak_bytes_with_lms,
        "measured": measured,
        "swapped_lists": report.swapped_lists,
        "swapped_tensors": report.swapped_tensors,
        "streamed_lists": report.streamed_lists,
    }


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    length, batch = int(sys.argv[1]), int(sys.argv[2])
    layers, width = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (2, 256)
    cell = sys.argv[6] if len(sys.argv) > 6 else "lstm"
    step, x, y = lstm_step(length, batch, width, layers, cell)
    if len(sys.argv) > 5 and sys.argv[5] != "serial":
        print(json.dumps(with_lms(step, x, y, int(sys.argv[5]))))
    else:
        print(json.dumps(plain(step, x, y, serial=sys.argv[5:] == ["serial"])))
