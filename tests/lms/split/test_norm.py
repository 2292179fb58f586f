"""lms/split/norm.py: Keras 2's fused batch norm (FusedBatchNormV3 and its gradient) split into
pieces computes the same batch norm: its output, running averages and gradients, along the batch
or, with a batch of 1, the rows; on TF 2.21 through tf.compat.v1's fused op, on 2.14.1 through
Keras 2's own layer too. Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from lms_equivalence import assert_close_gradients

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.layouts import layout, splittable
from lms.split.looped import piece_bounds
from lms.split.rewrite import running_ops, split_op

pytestmark = pytest.mark.compat


def _fused_step(factor: float, dtype=tf.float32):
    """A convolution, a fused batch norm in training (running averages mixed by `factor`) and
    the gradients of a weighted sum(y²) for the input, the filter, scale and offset."""
    mean_in, var_in = tf.constant([0.5, -1.0, 2.0, 0.0]), tf.constant([2.0, 1.0, 0.5, 3.0])

    @tf.function
    def step(x, kernel, scale, offset):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel, scale, offset])
            h = tf.cast(tf.nn.conv2d(x, kernel, 1, "SAME"), dtype)
            y, mean, variance = tf.compat.v1.nn.fused_batch_norm(
                h, scale, offset, mean_in, var_in, 1e-3, is_training=True,
                exponential_avg_factor=factor,
            )  # fmt: skip
            weights = tf.random.stateless_normal(tf.shape(y), seed=(9, 9))  # (sum(y²) of a
            loss = tf.reduce_sum(tf.cast(y, tf.float32) ** 2 * weights)  # norm: ~0 gradients)
        return [y, mean, variance, *tape.gradient(loss, [x, kernel, scale, offset])]

    return step


def _arguments(batch):
    x = tf.random.stateless_normal([batch, 12, 7, 3], seed=(1, 2)) * 2 + 1
    kernel = tf.random.stateless_normal([3, 3, 3, 4], seed=(3, 4))
    return x, kernel, tf.constant([1.0, 2.0, 0.5, 1.5]), tf.constant([0.1, 0.0, -0.2, 0.3])


def _assert_close(got, want, rtol):
    for g, w in zip(got, want, strict=True):
        g, w = np.asarray(g, np.float64), np.asarray(w, np.float64)
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol * np.abs(w).max())


@pytest.mark.parametrize("pieces", [2, 5])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("factor", [1.0, 0.01])
@pytest.mark.parametrize("which", ["forward", "gradient", "both"])
def test_a_fused_batch_norm_split_is_the_same_batch_norm(which, factor, batch, pieces):
    """Split alone or together: the forward (statistics in two passes, then each piece
    normalized by them; a forward also splits the gradients reading its saved statistics) and
    the gradient alone (computing the statistics again instead of reading the saved ones): the
    same output, running averages and gradients to 1e-5, every host copy read as kept for."""
    args = _arguments(batch)
    step = _fused_step(factor)
    want = [t.numpy() for t in step(*args)]
    concrete = step.get_concrete_function(*args)
    ops = {op.type: op for op in concrete.graph.get_operations()}
    forward, gradient = ops["FusedBatchNormV3"], ops["FusedBatchNormGradV3"]
    assert layout(forward).axis == layout(gradient).axis == (0 if batch > 1 else 1)
    io = HostStore().pieces()
    split = []
    if which in ("gradient", "both"):
        split.append(split_op(gradient, pieces, io))
    if which in ("forward", "both"):
        split.append(split_op(forward, pieces, io))
    # pieces of equal rows, the last what is left (lms/split/looped.py `piece_bounds`)
    assert all(s.pieces == len(piece_bounds(batch if batch > 1 else 12, pieces)) for s in split)
    graph = concrete.graph
    running = [op for op in running_ops(graph) if op.type.startswith("FusedBatchNorm")]
    # the gradient is split with its forward; the forward's pieces normalize in inference mode
    assert all(op.type == "FusedBatchNormV3" for op in running)
    assert any(op.get_attr("is_training") for op in running) == (which == "gradient")
    got = _tf_private.concrete_function_from_graph(concrete, graph)(*args)
    _assert_close([t.numpy() for t in got], want, 1e-5)
    assert io.store.held_bytes == 0


def test_fp16_batch_norm_split_keeps_its_statistics_in_float32():
    """Mixed precision: x and y in float16, the statistics and scale in float32 (as the fused
    kernel keeps them): the same to float16's precision."""
    args = _arguments(2)
    step = _fused_step(1.0, tf.float16)
    want = [t.numpy() for t in step(*args)]
    concrete = step.get_concrete_function(*args)
    io = HostStore().pieces()
    for op in list(concrete.graph.get_operations()):
        if op.type == "FusedBatchNormV3":
            split_op(op, 3, io)
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(*args)
    _assert_close([t.numpy() for t in got], want, 2e-3)
    assert io.store.held_bytes == 0


def test_an_inference_batch_norm_splits_in_one_pass_and_nchw_does_not():
    x = tf.random.stateless_normal([1, 10, 6, 4], seed=(5, 6))
    scale, offset = tf.ones([4]) * 2, tf.zeros([4]) + 0.5
    mean, variance = tf.constant([0.1, 0.2, 0.3, 0.4]), tf.constant([1.0, 2.0, 3.0, 4.0])

    @tf.function
    def step(x):
        y = tf.compat.v1.nn.fused_batch_norm(
            x * 2.0, scale, offset, mean, variance, is_training=False
        )
        return y[0] * 1.0

    @tf.function
    def channels_first(x):  # built, never run: NCHW on a CPU
        return tf.compat.v1.nn.fused_batch_norm(x, scale, offset, data_format="NCHW")[0] * 1.0

    nchw = channels_first.get_concrete_function(tf.transpose(x, [0, 3, 1, 2])).graph
    op = next(op for op in nchw.get_operations() if op.type == "FusedBatchNormV3")
    assert "FusedBatchNormV3 in NCHW" in splittable(op)
    want = step(x).numpy()
    concrete = step.get_concrete_function(x)
    op = next(op for op in concrete.graph.get_operations() if op.type == "FusedBatchNormV3")
    assert layout(op).kind == "inference"
    io = HostStore().pieces()
    split_op(op, 4, io)
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6)
    assert io.store.held_bytes == 0


@pytest.mark.skipif(
    not keras.__version__.startswith("2."), reason="Keras 3's batch norm is not fused"
)
def test_keras_2s_batch_norm_layer_trains_the_same_split():
    """Keras 2's BatchNormalization (fused) in a step with its moving averages updated: the
    same gradients and moving statistics with both of its ops split in three (to 1e-5; the conv
    bias's gradient, which batch norm makes ~0, to 1e-6 of the largest value)."""
    inputs = keras.Input((14, 10, 3), batch_size=1)
    y = keras.layers.BatchNormalization()(keras.layers.Conv2D(4, 3, padding="same")(inputs))
    model = keras.Model(inputs, keras.layers.Activation("relu")(y))
    x = tf.random.stateless_normal([1, 14, 10, 3], seed=(7, 8))
    layer = model.layers[2]

    def step(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_sum(out * out)
        return [*tape.gradient(loss, model.trainable_variables), layer.moving_mean.value()]

    start = [v.numpy() for v in model.variables]
    want = [t.numpy() for t in tf.function(step)(x)]
    for v, value in zip(model.variables, start, strict=True):
        v.assign(value)
    concrete = tf.function(step).get_concrete_function(x)
    io = HostStore().pieces()
    kinds = {"FusedBatchNormV3", "FusedBatchNormGradV3"}
    split = [
        split_op(op, 3, io).op_type
        for op in list(concrete.graph.get_operations())
        if op.type in kinds and splittable(op) is None
    ]
    assert "FusedBatchNormV3" in split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    assert_close_gradients([g.numpy() for g in got], want)
    assert io.store.held_bytes == 0


def _mobilenet_block(fused: bool):
    """MobileNetV2's first blocks in small: batch norms whose early gradients cancel (they
    depend on the order of the sums: ~1e-3 between Keras 2's fused and unfused batch norm)."""
    layers = keras.layers
    inputs = keras.Input((24, 24, 8), batch_size=4)
    x = layers.Conv2D(48, 1, use_bias=False)(inputs)
    x = layers.BatchNormalization(epsilon=1e-3, momentum=0.999, fused=fused)(x)
    x = layers.ReLU(6.0)(x)
    x = layers.DepthwiseConv2D(3, padding="same", use_bias=False)(x)
    x = layers.BatchNormalization(epsilon=1e-3, momentum=0.999, fused=fused)(x)
    x = layers.GlobalAveragePooling2D()(x)
    return keras.Model(inputs, layers.Dense(10)(x))


@pytest.mark.skipif(
    not keras.__version__.startswith("2."), reason="Keras 3's batch norm is not fused"
)
def test_an_ill_conditioned_batch_norm_split_is_as_close_as_the_unfused_one():
    """Where a batch norm's gradients cancel, no two orders of its sums agree to 1e-5: there
    the split one must be as close to the fused kernel's as Keras 2's unfused batch norm is
    (their largest differences, summed over the variables: within twice). Per variable the
    ratio is noise (one variable measured 2.0x in a full run); a term off by half measures 23x.
    Subtle errors are the well-conditioned tests' to catch (1e-5)."""
    fused, unfused = _mobilenet_block(True), _mobilenet_block(False)
    for a, b in zip(fused.variables, unfused.variables, strict=True):
        b.assign(a)
    x = tf.random.stateless_normal([4, 24, 24, 8], seed=(1, 2))

    def step_of(model):
        def step(x):
            with tf.GradientTape() as tape:
                out = model(x, training=True)
                loss = tf.reduce_sum(out * out)
            return tape.gradient(loss, model.trainable_variables)

        return tf.function(step)

    start = [v.numpy() for v in fused.variables]
    reference = [t.numpy() for t in step_of(fused)(x)]
    other = [t.numpy() for t in step_of(unfused)(x)]
    for v, value in zip(fused.variables, start, strict=True):
        v.assign(value)
    concrete = step_of(fused).get_concrete_function(x)
    io = HostStore().pieces()
    first = next(op for op in concrete.graph.get_operations() if op.type == "FusedBatchNormV3")
    split_op(first, 3, io)  # and its gradient
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    split = sum(np.abs(g.numpy() - r).max() for g, r in zip(got, reference, strict=True))
    unfused = sum(np.abs(u - r).max() for u, r in zip(other, reference, strict=True))
    assert split <= 2 * unfused, (split, unfused)  # (measured 0.14-0.66 over 7 runs)
    assert io.store.held_bytes == 0
