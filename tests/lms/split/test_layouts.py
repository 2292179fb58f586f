"""lms/split/layouts.py: what cannot be split says why; convolutions, pooling, their gradients,
a bias's gradient and a concat split along the batch compute the same outputs and gradients.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import numpy as np
import pytest
import tensorflow as tf

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.layouts import BATCH_OPS, splittable
from lms.split.rewrite import split_op

pytestmark = pytest.mark.compat


def test_what_cannot_be_split_says_why():
    @tf.function
    def step(x, kernel, row):
        y = tf.nn.conv2d(x, kernel, 1, "SAME")
        channels_first = tf.nn.max_pool2d(tf.transpose(y, [0, 3, 1, 2]), 2, 2, "SAME", "NCHW")
        return y + row, tf.nn.softmax(y), channels_first  # (built, never run: NCHW on a CPU)

    x = tf.zeros([1, 8, 8, 2])
    graph = step.get_concrete_function(x, tf.zeros([3, 3, 2, 2]), tf.zeros([1, 8, 1, 2])).graph
    ops = {op.type: op for op in graph.get_operations()}
    assert splittable(ops["Conv2D"]) is None  # along the rows, with halos
    assert "MaxPool in NCHW" in splittable(ops["MaxPool"])
    assert "Softmax is not split yet" in splittable(ops["Softmax"])
    # the row broadcasts along the rows, the split axis of a batch of 1
    assert "neither matches nor broadcasts along axis 1" in splittable(ops["AddV2"])
    with pytest.raises(ValueError, match="cannot split MaxPool2d: MaxPool in NCHW"):
        split_op(ops["MaxPool"], 2, HostStore().pieces())


@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
def test_convolutions_pooling_and_their_gradients_split_along_the_batch(three_d, split_every):
    """Forward, input gradient and pooling pieces are assembled; a filter's gradient is the sum
    of the pieces' (so it rounds differently: compared to 1e-5)."""
    shape = [4, 12, 10, 8, 3] if three_d else [4, 12, 10, 3]
    conv, pool = (tf.nn.conv3d, tf.nn.max_pool3d) if three_d else (tf.nn.conv2d, tf.nn.max_pool2d)
    x = tf.random.stateless_normal(shape, seed=(1, 2))
    kernel = tf.random.stateless_normal([3] * (len(shape) - 2) + [3, 6], seed=(3, 4))

    @tf.function
    def step(x, kernel):
        bias = tf.range(6, dtype=tf.float32)
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, bias])
            strides = [1] * len(shape)
            y = tf.nn.bias_add(conv(x, kernel, strides, "SAME"), bias)
            y = pool(tf.nn.relu(y), 2, 2, "SAME")
            y = tf.concat([y, 2.0 * y], axis=-1)
            loss = tf.reduce_sum(y * y)
        return tape.gradient(loss, [x, kernel, bias])

    want = [t.numpy() for t in step(x, kernel)]
    concrete = step.get_concrete_function(x, kernel)
    store = HostStore()
    split = split_every(concrete.graph, store.pieces(), lambda op: op.type in BATCH_OPS)
    kinds = "3D" if three_d else "2D"
    assert {t.replace("V2", "") for t in split} >= {
        f"Conv{kinds}",
        f"MaxPool{'3D' if three_d else ''}",
        f"MaxPool{'3D' if three_d else ''}Grad",
        f"Conv{kinds}BackpropInput",
        f"Conv{kinds}BackpropFilter",
        "BiasAddGrad",
        "Concat",  # ConcatV2, without its "V2" as the 3D gradients
    }
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x, kernel)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert store.held_bytes == 0
