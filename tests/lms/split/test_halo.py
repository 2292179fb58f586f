"""lms/split/halo.py: windowed ops with a batch of 1 split along the rows with halos
(convolutions, max and average pooling and their gradients) compute the same outputs and
gradients, every host copy read as often as it was kept for. Marked compat: also run on
TensorFlow 2.14.1 (Keras 2)."""

import numpy as np
import pytest
import tensorflow as tf
from graph_ops import every_op
from split_steps import max_pool_gradient

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.halo import ROW_OPS
from lms.split.layouts import splittable
from lms.split.rewrite import SCOPE, split_op

pytestmark = pytest.mark.compat


# batch-1 window ops along the rows: (2D or 3D, padding, stride, dilation, depthwise, kernel)
HALO_CASES = {
    "same": ("2d", "SAME", 1, 1, False, 3),
    "valid": ("2d", "VALID", 1, 1, False, 3),
    "same-stride2": ("2d", "SAME", 2, 1, False, 3),
    "valid-stride2-k5": ("2d", "VALID", 2, 1, False, 5),
    "same-dilated": ("2d", "SAME", 1, 2, False, 3),
    "explicit": ("2d", [[0, 0], [2, 1], [0, 3], [0, 0]], 1, 1, False, 3),
    "depthwise-same": ("2d", "SAME", 1, 1, True, 3),
    "depthwise-valid-stride2": ("2d", "VALID", 2, 1, True, 3),
    "3d-same": ("3d", "SAME", 1, 1, False, 3),
    "3d-valid-stride2": ("3d", "VALID", 2, 1, False, 3),
}


def _window_step(dims, padding, stride, dilation, depthwise, size):
    """conv -> ReLU -> max pool (3x3 / 2, the halo overlapping) and the loss's gradients."""

    def forward(x, kernel):
        if dims == "3d":
            y = tf.nn.conv3d(x, kernel, [1, stride, 1, 1, 1], padding)
            return tf.nn.max_pool3d(tf.nn.relu(y), 3, 2, "SAME")
        if depthwise:
            strides = [1, stride, stride, 1]
            y = tf.nn.depthwise_conv2d(x, kernel, strides, padding, dilations=[dilation] * 2)
        else:
            y = tf.nn.conv2d(x, kernel, stride, padding, dilations=dilation)
        return tf.nn.max_pool2d(tf.nn.relu(y), 3, 2, "VALID" if stride > 1 else "SAME")

    @tf.function
    def step(x, kernel):
        with tf.GradientTape() as tape:
            tape.watch([x, kernel])
            y = forward(x, kernel)
            loss = tf.reduce_sum(y * y)
        return [y, *tape.gradient(loss, [x, kernel])]

    return step


@pytest.mark.parametrize("pieces", [2, 5, 23])
@pytest.mark.parametrize("case", HALO_CASES.values(), ids=HALO_CASES)
def test_a_batch_of_one_splits_along_the_rows_with_halos(case, pieces):
    """Convolutions (dilated, strided, depthwise, explicitly padded, 3D), max pooling and their
    gradients with a batch of 1, split along the rows (23: one row per piece): the same output
    and gradients to 1e-5 (the gradients' sums are ordered differently: measured up to 2e-7 on
    oneDNN's and Eigen's kernels; a stride-1 convolution's input gradient is computed as a
    forward convolution), every host copy read as often as kept for."""
    dims, _, _, dilation, depthwise, size = case
    if dilation > 1 and not _tf_private.onednn_enabled():
        pytest.skip("Eigen's CPU kernels have no dilated convolution gradient (the step fails)")
    shape = [1, 13, 11, 9, 3] if dims == "3d" else [1, 23, 17, 3]
    kernel_shape = [size] * (len(shape) - 2) + [3, 2 if depthwise else 4]
    x = tf.random.stateless_normal(shape, seed=(1, 2))
    kernel = tf.random.stateless_normal(kernel_shape, seed=(3, 4))
    step = _window_step(*case)
    want = [t.numpy() for t in step(x, kernel)]
    concrete = step.get_concrete_function(x, kernel)
    store, split = HostStore(), []
    io = store.pieces()  # one for the graph: the pool reads the convolution's pieces in place
    for op in list(concrete.graph.get_operations()):
        if op.type in ROW_OPS:
            assert splittable(op) is None, (op.type, splittable(op))
            split.append(split_op(op, pieces, io))
    assert len(split) == 5  # the convolution, its two gradients, the pool and its gradient
    # (at least the pieces asked, up to the rows: fewer rows each where alike pieces then loop)
    assert all(s.axis == 1 and s.pieces >= 2 for s in split)
    # a stride-1 convolution's input gradient: its pieces are forward convolutions of exactly
    # their rows (halo.py `_forward_input_grad`), not gradient ops over the windows' region
    kinds = ("Conv2DBackpropInput", "Conv3DBackpropInputV2", "DepthwiseConv2dNativeBackpropInput")
    pieces_ops = [op for op in every_op(concrete.graph) if op.name.startswith(SCOPE)]
    as_gradient = [op for op in pieces_ops if op.type in kinds]
    # (the explicit case pads 3 columns after a 3-wide window: as the gradient op)
    forward = case[2] == 1 and not depthwise and not isinstance(case[1], list)
    assert (not as_gradient) == forward, [op.type for op in pieces_ops]
    # no plain Pad feeds a piece's convolution: Grappler's remapper folds it in and fails when
    # the Pad has a control fanout, as LMS's enforced order gives it (halo.py)
    for op in pieces_ops:
        if op.type.startswith(("Conv", "Depthwise")):
            assert op.inputs[0].op.type != "Pad", op.name
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x, kernel)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert store.held_bytes == 0


# average pools with a batch of 1: (2D or 3D, window, stride, padding)
AVG_POOL_CASES = {
    "same-3x3-stride2": ("2d", 3, 2, "SAME"),
    "same-2x2-stride2": ("2d", 2, 2, "SAME"),
    "same-5x5-stride1": ("2d", 5, 1, "SAME"),
    "valid-3x3-stride2": ("2d", 3, 2, "VALID"),
    "3d-same-3-stride2": ("3d", 3, 2, "SAME"),
}


@pytest.mark.parametrize("pieces", [2, 5, 23])
@pytest.mark.parametrize("case", AVG_POOL_CASES.values(), ids=AVG_POOL_CASES)
def test_a_batch_of_one_splits_average_pools_along_the_rows(case, pieces, split_every):
    """Average pooling and its gradient with a batch of 1 split along the rows: SAME padding
    divides each window by its count inside the image, which the pieces' zero-padded VALID
    averages are scaled back to; the same output and input gradient to 1e-5."""
    dims, window, stride, padding = case
    shape = [1, 13, 11, 9, 3] if dims == "3d" else [1, 23, 17, 3]
    pool = tf.nn.avg_pool3d if dims == "3d" else tf.nn.avg_pool2d

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = pool(x * x, window, stride, padding)
            loss = tf.reduce_sum(y * y)
        return [y, tape.gradient(loss, x)]

    x = tf.random.stateless_normal(shape, seed=(5, 6))
    want = [t.numpy() for t in step(x)]
    concrete = step.get_concrete_function(x)
    io = HostStore().pieces()
    kinds = ("AvgPool", "AvgPool3D", "AvgPoolGrad", "AvgPool3DGrad")
    split = split_every(concrete.graph, io, lambda op: op.type in kinds, pieces)
    assert len(split) == 2  # the pool and its gradient
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert io.store.held_bytes == 0


@pytest.mark.parametrize("batch", [1, 3], ids=["rows", "batch"])
def test_a_max_pool_gradient_recomputes_its_forward_output_per_piece(batch):
    """A split MaxPoolGrad's pieces read their forward output from a MaxPool over the input they
    read (lms/split/pieces.py max_pooled), never from a host copy of the whole pool's output:
    oneDNN pairs such a read with its fast kernel (5x on GoogLeNet 2048²'s pools), and on a GPU
    the output's bytes stay off the link. The gradient is the same to the bit (ties included:
    the pool reads a ReLU's zeros)."""
    step = max_pool_gradient()
    x = tf.random.stateless_normal([batch, 23, 17, 3], seed=(7, 8))
    want = step(x).numpy()
    concrete = step.get_concrete_function(x)
    store = HostStore()
    grad = next(op for op in concrete.graph.get_operations() if op.type == "MaxPoolGrad")
    pooled = grad.inputs[1]
    split = split_op(grad, 4, store.pieces())
    assert split.axis == (1 if batch == 1 else 0)
    pieces = [op for op in every_op(concrete.graph) if op.type == "MaxPoolGrad"]
    pieces.remove(grad)
    # each piece made (a loop's body: one for its alike pieces, lms/split/looped.py)
    assert 3 <= len(pieces) <= split.pieces and split.pieces >= (4 if batch == 1 else 3)
    for piece in pieces:
        forward = piece.inputs[1].op
        assert forward.type == "MaxPool" and forward.inputs[0] is piece.inputs[0]
    kept = [r for r in pooled.consumers() if r is not grad and r.type != "Mul"]  # y * y: the loss
    assert kept == [], "the pool's output is kept on the host for the pieces"
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    np.testing.assert_array_equal(got.numpy(), want)
    assert store.held_bytes == 0


def test_a_windows_border_scales_are_its_scales_that_are_not_one():
    """`Window.border_scales` (what tells alike pieces' forms apart) names every row of a span
    whose scale is not 1, with that scale, for every window of up to 13 rows, extent 5, stride
    3 and padding 3, and every span of its output rows (`scales`, an array a row, is what the
    pieces compute with)."""
    from lms.split.halo import Window

    spans = 0
    for size_in in range(1, 14):
        for extent in range(1, 6):
            for stride in range(1, 4):
                for before in range(extent):  # (a window never lies wholly in the padding)
                    size_out = (size_in + 2 * before - extent) // stride + 1
                    window = Window(size_in, size_out, extent, stride, before)
                    for a in range(size_out):
                        for b in range(a + 1, size_out + 1):
                            scales = window.scales(a, b)
                            want = [(k, float(v)) for k, v in enumerate(scales) if v != 1]
                            found = [(k, v) for k, v in window.border_scales(a, b) if v != 1]
                            assert found == want, (size_in, extent, stride, before, a, b)
                            spans += 1
    assert spans > 5000
