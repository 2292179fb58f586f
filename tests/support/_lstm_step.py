"""Child of test_loops.py: two stacked Keras LSTMs (each a While loop over the sequence on the
CPU), their step analysed, simulated and measured without LMS in this fresh process.

Usage: _lstm_step.py LENGTH BATCH. Prints one JSON line: the loops the analysis saw, the
simulated and the measured peak. Needs TF_CPU_ALLOCATOR_USE_BFC=true.
"""

import json
import sys

import keras
import tensorflow as tf

import lms
from lms.graph.cpu_host import cpu_kernels


def lstm_step(length: int, batch: int, width: int = 256):
    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(1000, width)(tokens)
    x = keras.layers.LSTM(width, return_sequences=True)(x)
    x = keras.layers.LSTM(width)(x)
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


if __name__ == "__main__":
    keras.utils.set_random_seed(0)
    step, x, y = lstm_step(int(sys.argv[1]), int(sys.argv[2]))
    analysis = lms.internal.analyze(step.get_concrete_function(x, y).graph)
    analysis.kernels = cpu_kernels()
    float(step(x, y))
    tf.config.experimental.reset_memory_stats("CPU:0")
    for _ in range(2):
        float(step(x, y))
    print(
        json.dumps(
            {
                "loops": analysis.loops,
                "simulated": lms.internal.simulate(analysis).peak_bytes,
                "measured": tf.config.experimental.get_memory_info("CPU:0")["peak"],
            }
        )
    )
