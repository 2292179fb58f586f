"""lms/split/ops.py, lms/split/halo.py and lms/split/fit.py: an element-wise op split into pieces
computes
the same bits; windowed ops split along the batch, or with a batch of 1 along the rows with halos,
compute the same outputs and gradients; what cannot be split says why; a step with its largest
ops split (and everything swapped) makes the same updates as the plain step on the update
check's ten models; with `split="auto"`, a step that swapping alone cannot fit fits in
simulation.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging

import keras
import numpy as np
import pytest
import tensorflow as tf
from lms_cases import workload_case
from lms_equivalence import (
    EQUIVALENCE_CASES,
    aggressive,
    assert_close_gradients,
    assert_same_updates,
)

import lms
import lms.split.fit
from lms import _tf_private
from lms.device.rewriter import rewrite
from lms.device.swap import HostStore
from lms.errors import ParameterError
from lms.split.halo import ROW_OPS
from lms.split.norm import FUSED_NORMS
from lms.split.ops import (
    BATCH_OPS,
    ELEMENTWISE_OPS,
    DevicePieces,
    HostPieces,
    layout,
    running_ops,
    split_op,
    splittable,
)

pytestmark = pytest.mark.compat


def _step(a, b, bias):
    x = tf.nn.relu(a) * 3.0
    y = tf.math.add_n([x, b, a])
    return tf.nn.bias_add(y, bias)


@pytest.mark.parametrize("batch, axis", [(2, 0), (1, 1)])
def test_a_split_element_wise_op_computes_the_same_bits(batch, axis, exact_arithmetic):
    a = tf.random.stateless_normal([batch, 40, 24, 8], seed=(1, 2))
    b = tf.random.stateless_normal([batch, 40, 24, 8], seed=(3, 4))
    bias = tf.random.stateless_normal([8], seed=(5, 6))
    function = tf.function(_step)
    want = function(a, b, bias).numpy()
    concrete = function.get_concrete_function(a, b, bias)
    graph, store = concrete.graph, HostStore()
    add_n = next(op for op in graph.get_operations() if op.type == "AddN")
    split = split_op(add_n, 5, HostPieces(store), "test")
    assert (split.op_type, split.pieces, split.axis) == ("AddN", min(5, 40 if axis else 2), axis)
    assert split.bytes == 4 * a.numpy().nbytes
    bias_add = next(op for op in graph.get_operations() if op.type == "BiasAdd")
    split_op(bias_add, 3, HostPieces(store))  # the bias broadcasts: read whole by each piece
    got = _tf_private.concrete_function_from_graph(concrete, graph)(a, b, bias).numpy()
    assert np.array_equal(got, want)
    assert store.held_bytes == 0  # every host copy read as often as it was kept for
    traffic = store.take_traffic()
    assert traffic.in_bytes == traffic.out_bytes > 0


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
        split_op(ops["MaxPool"], 2, HostPieces(HostStore()))


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
    oneDNN's and Eigen's kernels), every host copy read as often as kept for."""
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
    io = HostPieces(store)  # one for the graph: the pool reads the convolution's pieces in place
    for op in list(concrete.graph.get_operations()):
        if op.type in ROW_OPS:
            assert splittable(op) is None, (op.type, splittable(op))
            split.append(split_op(op, pieces, io))
    assert len(split) == 5  # the convolution, its two gradients, the pool and its gradient
    assert all(s.axis == 1 and s.pieces == min(pieces, s.pieces) for s in split)
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
def test_a_batch_of_one_splits_average_pools_along_the_rows(case, pieces):
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
    io = HostPieces(HostStore())
    kinds = ("AvgPool", "AvgPool3D", "AvgPoolGrad", "AvgPool3DGrad")
    split = _split_every(concrete.graph, io, lambda op: op.type in kinds, pieces)
    assert len(split) == 2  # the pool and its gradient
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert io.store.held_bytes == 0


def _split_every(graph, io, wanted, pieces: int = 3) -> list[str]:
    """Split, in three (or `pieces`), every op of `graph` that runs, can be split and
    `wanted(op)` accepts: the types split, in graph order."""
    running, split = running_ops(graph), []
    for op in list(graph.get_operations()):
        if wanted(op) and op in running and splittable(op) is None:
            split.append(split_op(op, pieces, io).op_type)
    return split


def _model_step(model, training=False, output=False):
    """A step's gradients of sum(model(x)²) for x and the weights (and the output first)."""

    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            out = model(x, training=training)
            loss = tf.reduce_sum(out * out)
        gradients = tape.gradient(loss, [x, *model.trainable_variables])
        return [out, *gradients] if output else gradients

    return step


@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
def test_convolutions_pooling_and_their_gradients_split_along_the_batch(three_d):
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
    split = _split_every(concrete.graph, HostPieces(store), lambda op: op.type in BATCH_OPS)
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


@pytest.mark.parametrize("batch", [1, 3])
def test_a_padding_and_its_gradients_slice_split_shifted(batch):
    """ResNet50's stem (ZeroPadding2D, a 7x7 stride-2 convolution) with its Pad, the Slice of
    its gradient and the convolutions split: piece rows [a, b) read input rows shifted by the
    padding (zeros outside), along the batch or the rows; the same outputs and gradients."""
    inputs = keras.Input((14, 12, 3), batch_size=batch)
    padded = keras.layers.ZeroPadding2D(((3, 2), (1, 1)))(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(4, 7, strides=2)(padded))
    x = tf.random.stateless_normal([batch, 14, 12, 3], seed=(1, 2))
    step = _model_step(model)
    want = [t.numpy() for t in tf.function(step)(x)]
    concrete = tf.function(step).get_concrete_function(x)
    io = HostPieces(HostStore())
    kinds = ("Pad", "Slice", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    split = _split_every(concrete.graph, io, lambda op: op.type in kinds)
    assert {"Pad", "Slice", "Conv2DBackpropInput"} <= set(split)
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert io.store.held_bytes == 0


@pytest.mark.parametrize("batch", [1, 3])
def test_batch_norms_statistics_and_their_gradients_split_over_the_pieces(batch):
    """Keras 3's batch norm computes its moments with Mean, SquaredDifference and Tile; split,
    each piece's partial Mean is weighted by its share of the rows and the pieces are summed, so
    the result is the same batch norm (to 1e-5; the conv bias's gradient, which batch norm makes
    ~0, to 1e-6 of the largest value). Keras 2 fuses it: test_split_norm.py."""
    inputs = keras.Input((14, 12, 3), batch_size=batch)
    y = keras.layers.Conv2D(4, 3, padding="same")(inputs)
    y = keras.layers.BatchNormalization()(y, training=True)
    model = keras.Model(inputs, keras.layers.Activation("relu")(y))
    x = tf.random.stateless_normal([batch, 14, 12, 3], seed=(1, 2))
    step = _model_step(model, training=True, output=True)
    want = [t.numpy() for t in tf.function(step)(x)]
    concrete = tf.function(step).get_concrete_function(x)
    io = HostPieces(HostStore())
    kinds = BATCH_OPS.keys() | ELEMENTWISE_OPS
    split = set(_split_every(concrete.graph, io, lambda op: op.type in kinds))
    if not keras.__version__.startswith("2."):
        assert {"Mean", "Sum", "Tile", "SquaredDifference", "Conv2D"} <= split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    assert_close_gradients([g.numpy() for g in got], want)
    assert io.store.held_bytes == 0


def test_an_upsampling_its_gradients_sums_and_a_skip_concat_split_along_the_depth():
    """The 3D U-Net's decoder at a batch of 1: UpSampling3D (three Tiles over interleaved axes),
    its gradient (Sums over those axes, read along the input's axis that becomes the output's
    depth), the Reshapes between them (the repeat's rows merged and factored, and viewed with
    unit axes before every axis), the skip connection's ConcatV2 and its gradient's Slices,
    split in three: the same bits."""
    inputs = keras.Input((8, 6, 6, 3), batch_size=1)
    skip = keras.layers.Conv3D(4, 3, padding="same")(inputs)
    up = keras.layers.UpSampling3D(2)(keras.layers.MaxPooling3D(2)(skip))
    joined = keras.layers.Concatenate()([up, skip])
    model = keras.Model(inputs, keras.layers.Conv3D(2, 3, padding="same")(joined))
    x = tf.random.stateless_normal([1, 8, 6, 6, 3], seed=(1, 2))
    step = _model_step(model)
    want = [t.numpy() for t in tf.function(step)(x)]
    concrete = tf.function(step).get_concrete_function(x)
    io = HostPieces(HostStore())
    kinds = ("Tile", "Slice", "ConcatV2", "Sum", "Reshape", "ExpandDims")
    split = _split_every(concrete.graph, io, lambda op: op.type in kinds)
    assert {"ConcatV2", "Slice"} <= set(split)
    if not keras.__version__.startswith("2."):  # Keras 2 repeats by slices and a ConcatV2
        assert split.count("Tile") >= 3 and split.count("Sum") >= 3
        # per repeated axis: the forward's merge, the gradient's view and its unit axes; the
        # depth's factoring too
        assert split.count("Reshape") >= 3 * 3 + 1
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w)
    assert io.store.held_bytes == 0


def _rows_reshaped(x):
    """Rows merged with the next axis, factored, viewed with unit axes and expanded: the views an
    upsampling's repeat and its gradient take of the rows."""
    with tf.GradientTape() as tape:
        tape.watch(x)
        merged = tf.reshape(x * x, [1, 24, 5, 2])  # (8, 3) rows merged into 24
        factored = tf.reshape(merged * 2.0, [1, 6, 4, 5, 2])  # 24 rows factored as (6, 4)
        viewed = tf.reshape(factored + 1.0, [1, 1, 6, 1, 4, 5, 2])
        loss = tf.reduce_sum(tf.expand_dims(viewed * viewed, 2))
    return [merged, factored, viewed, loss, tape.gradient(loss, x)]


def test_reshapes_that_keep_rows_apart_split_and_the_others_do_not():
    """A Reshape (ExpandDims, Squeeze) splits when each piece's rows are whole rows of its input:
    the same rows, rows merged with the next axis (stored f output rows per input row), or rows
    factored as (rows / f, f) (read f input rows per output row), unit axes before them or not.
    The three split in three: the same bits, and nothing left on the host."""
    x = tf.random.stateless_normal([1, 8, 3, 5, 2], seed=(5, 6))
    want = [t.numpy() for t in tf.function(_rows_reshaped)(x)]
    concrete = tf.function(_rows_reshaped).get_concrete_function(x)
    found = {
        tuple(op.outputs[0].shape.as_list()): layout(op)
        for op in concrete.graph.get_operations()
        if op.type == "Reshape" and op.inputs[0].shape.rank > 1 and "gradient" not in op.name
    }
    merged, factored, viewed = (
        found[(1, 24, 5, 2)],
        found[(1, 6, 4, 5, 2)],
        found[(1, 1, 6, 1, 4, 5, 2)],
    )
    assert (merged.length, merged.store_rows, merged.read_rows) == (8, 3, 1)
    assert (factored.length, factored.read_rows, factored.store_rows) == (6, 4, 1)
    assert (viewed.axis, viewed.read_axis, viewed.length) == (2, 1, 6)
    io = HostPieces(HostStore())
    split = _split_every(concrete.graph, io, lambda op: op.type in ("Reshape", "ExpandDims"))
    assert split.count("Reshape") >= 3 and "ExpandDims" in split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g.numpy(), w)
    assert io.store.held_bytes == 0

    # rows that move across the split axis: transposed, or merged with an axis they do not lead
    def moved(t):
        return [tf.reshape(t, [1, 3, 8, 5, 2]), tf.reshape(t, [1, 4, 30, 2])]

    graph = tf.function(moved).get_concrete_function(x).graph
    reasons = [layout(op) for op in graph.get_operations() if op.type == "Reshape"]
    assert reasons == ["a Reshape that moves rows across the split axis"] * 2


def _chain(x, kernel):
    with tf.GradientTape() as tape:
        tape.watch([x, kernel])
        y = tf.nn.max_pool2d(tf.nn.conv2d(x, kernel, 1, "SAME"), 3, 2, "SAME")
        z = tf.nn.max_pool2d(y, 2, 2, "SAME")
        loss = tf.reduce_sum(z * z)
    return [z, *tape.gradient(loss, [x, kernel])]


@pytest.mark.parametrize("order", ["producers-first", "readers-first"])
def test_a_chain_of_split_ops_passes_its_pieces_host_to_host(order):
    """A convolution read only by a pool, read only by a pool: split, each reads the pieces of
    the one before in place on the host (split before or after it), so no whole output of the
    chain is assembled on the device and no copy of one goes back to the host."""
    x = tf.random.stateless_normal([1, 20, 16, 3], seed=(1, 2))
    kernel = tf.random.stateless_normal([3, 3, 3, 4], seed=(3, 4))
    want = [t.numpy() for t in tf.function(_chain)(x, kernel)]
    concrete = tf.function(_chain).get_concrete_function(x, kernel)
    graph, store = concrete.graph, HostStore()
    io = HostPieces(store)
    kinds = ("Conv2D", "MaxPool", "MaxPoolGrad", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    names = [op.name for op in graph.get_operations() if op.type in kinds]
    for name in names if order == "producers-first" else names[::-1]:
        split_op(graph.get_operation_by_name(name), 3, io)
    function = _tf_private.concrete_function_from_graph(concrete, graph)
    for _ in range(2):  # every host array freed after each step
        got = function(x, kernel)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
        assert store.held_bytes == 0
    # to the host per step: each split op's output by its pieces (the filter gradient is summed
    # on the device), x once for the convolution and its filter gradient (one host copy for
    # both), the loss's gradient 2z for the second pool's gradient; nothing of the chain whole
    conv, y, z = 20 * 16 * 4, 10 * 8 * 4, 5 * 4 * 4
    outputs = conv + y + z + y + conv + x.numpy().size  # ... + the pools' and the input's grads
    kept = x.numpy().size + z
    assert store.take_traffic().out_bytes == 2 * 4 * (outputs + kept)


@pytest.mark.parametrize("batch", [1, 3])
def test_the_gpu_paths_pieces_compute_the_same_on_the_cpu(batch):
    """DevicePieces (a GPU's host copies through the CPU device, a host concat) exercised here,
    where both devices are the CPU: every op of a conv -> pool -> pool step that can be split,
    split in three, along the batch or the rows; its memory is only a GPU's to measure."""
    x = tf.random.stateless_normal([batch, 20, 16, 3], seed=(1, 2))
    kernel = tf.random.stateless_normal([3, 3, 3, 4], seed=(3, 4))
    want = [t.numpy() for t in tf.function(_chain)(x, kernel)]
    concrete = tf.function(_chain).get_concrete_function(x, kernel)
    split = set(_split_every(concrete.graph, DevicePieces(), lambda op: True))
    kinds = {"Conv2D", "MaxPool", "MaxPoolGrad", "Conv2DBackpropFilter", "Conv2DBackpropInput"}
    assert kinds <= split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x, kernel)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_the_split_option_is_checked():
    for bad in ("on", {"AddN": 1}, {"AddN": True}, {}):
        with pytest.raises(ParameterError, match="split"):
            lms.LMS(device_memory="1GiB", split=bad)
    assert lms.LMS(device_memory="1GiB").options.split == "auto"


def _largest_splittable(graph, count: int, types) -> list:
    sizes, running = [], running_ops(graph)
    for op in graph.get_operations():
        if op.type in types and op in running and splittable(op) is None:
            tensors = (*op.inputs, *op.outputs)
            size = sum((t.shape.num_elements() or 0) * t.dtype.size for t in tensors)
            sizes.append((size, op.name))
    return [name for _, name in sorted(sizes, reverse=True)[:count]]


@pytest.mark.parametrize("make, tolerance", EQUIVALENCE_CASES.values(), ids=EQUIVALENCE_CASES)
def test_a_step_with_its_largest_element_wise_ops_split_makes_the_same_updates(
    make, tolerance, exact_arithmetic, request
):
    """The three largest element-wise ops, the three largest convolutions, pooling ops or
    their gradients (along the batch, or with a batch of 1 along the rows with halos) and the
    two largest fused batch norms (Keras 2's) in three pieces each, then every swappable tensor
    swapped (pieces included): the rewrite and the split together.

    Not MobileNetV2's batch norms: its early layers' updates there differ from the fused
    kernel's by up to 0.8 % when a batch norm's sums are ordered otherwise, and by as much with
    Keras 2's own unfused batch norm (test_split_norm.py compares the split with that)."""
    case = make()
    concrete = case.step.get_concrete_function(case.images, case.labels)
    store = HostStore()
    io = HostPieces(store)
    names = _largest_splittable(concrete.graph, 3, ELEMENTWISE_OPS)
    assert len(names) == 3
    names += _largest_splittable(concrete.graph, 3, BATCH_OPS)
    assert len(names) == 6
    if request.node.callspec.id != "mobilenetv2":
        names += _largest_splittable(concrete.graph, 2, FUSED_NORMS)
    for name in names:
        op = concrete.graph.get_operation_by_name(name)
        if splittable(op) is None:  # (a fused batch norm's gradient: split with its forward)
            split_op(op, 3, io)
    analysis = lms.analyze(concrete.graph)
    plan = lms.plan(analysis, aggressive().parameters)
    rewritten = rewrite(concrete, analysis, plan, store)
    assert_same_updates(case, rewritten, tolerance)
    assert store.held_bytes == 0


def test_auto_split_fits_what_swapping_alone_cannot_in_simulation():
    """ResNet50 at 1024² b1 in 400 MiB: swapping alone stops at its largest AddN (a batch norm's
    input gradient, 192 MiB with its inputs; best peak 399.7 MiB over the 360 MiB budget; with
    Keras 2, at a fused batch norm's gradient: 527.5 MiB). With "auto", rounds split the ops
    that crowd the room beside the resident bytes (AddNs along the rows, the first max pool's
    gradient, convolutions with halos, Keras 2's fused batch norms) and a plan fits (356.8 MiB
    here; 348.6 with Keras 2), in a few tunings more, not one per op."""
    case = workload_case("resnet50", 1024, 1)
    args = (case.step, case.images, case.labels)
    swapped = lms.LMS(device_memory="400MiB", calibration_steps=0, split="off").plan_only(*args)
    assert not swapped.fits  # (its floor: an AddN with oneDNN's kernels, a convolution's with
    # Eigen's, whose temporaries are larger)
    split = lms.LMS(device_memory="400MiB", calibration_steps=0).plan_only(*args)  # "auto"
    assert split.fits and split.peak_bytes_with_lms <= split.budget_bytes
    types = {s["op_type"] for s in split.splits}
    if keras.__version__.startswith("2."):
        assert types & {"FusedBatchNormV3", "FusedBatchNormGradV3"}
    else:
        assert {"AddN", "MaxPoolGrad", "Conv2D"} <= types
    assert all(s["pieces"] >= 2 and s["axis"] == 1 for s in split.splits)
    assert lms.PlanReport.from_dict(split.to_dict()).splits == split.splits


def test_auto_split_also_splits_when_only_the_allocators_chunks_miss_the_budget(caplog):
    """GoogLeNet 1216² b1 in 400 MiB with oneDNN's kernels: the swap plans' bytes asked fit,
    their BFC chunks do not (400 MiB for a 360 MiB budget), and the tuner keeps the closest
    with a warning. Splitting used to start only when no plan's bytes fit, so this size was
    planned over its budget (a search's prediction stopped at 1152²); now it is split too
    (pool1's gradient into pieces: 345.7 MiB). With Eigen's kernels no plan's bytes fit."""
    case = workload_case("googlenet", 1216, 1)
    args = (case.step, case.images, case.labels)
    with caplog.at_level(logging.WARNING, logger="lms"):
        swapped = lms.LMS(device_memory="400MiB", calibration_steps=0, split="off").plan_only(*args)
    assert not swapped.fits and swapped.peak_bytes_with_lms > swapped.budget_bytes
    if _tf_private.onednn_enabled() and not keras.__version__.startswith("2."):
        assert "its bytes asked fit" in caplog.text  # the case this test is about
    split = lms.LMS(device_memory="400MiB", calibration_steps=0).plan_only(*args)
    assert split.fits and split.peak_bytes_with_lms <= split.budget_bytes
    assert "MaxPoolGrad" in {s["op_type"] for s in split.splits}


def test_a_piece_too_large_for_the_room_is_named_as_what_sets_the_limit():
    """Two rows of 1024 x 256 channels: split into its two rows (the most the rows allow), a
    convolution gradient's piece still needs 8 MiB or more with its halo and its kernel's
    temporary where the budget leaves 2.6 MiB. NothingFitsError says the floor is that piece,
    and the limits table reads it as the memory of a piece."""
    from suite.reporting.limits_table import failure_cause

    f1 = tf.Variable(tf.random.stateless_normal([3, 3, 4, 256], seed=(1, 2)) * 0.1)
    f2 = tf.Variable(tf.random.stateless_normal([3, 3, 256, 4], seed=(3, 4)) * 0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.relu(tf.nn.conv2d(x, f1, 1, "SAME"))
            loss = tf.reduce_sum(tf.nn.conv2d(y, f2, 1, "SAME"))
        gradients = tape.gradient(loss, [f1, f2])
        f1.assign_sub(0.01 * gradients[0])
        f2.assign_sub(0.01 * gradients[1])
        return loss

    planner = lms.LMS(device_memory="3MiB", calibration_steps=0)
    with pytest.raises(lms.NothingFitsError) as raised:
        planner.wrap(step)(tf.zeros([1, 2, 1024, 4]))
    message = str(raised.value)
    # oneDNN's kernels: the input gradient's piece; Eigen's: the filter gradient's, whose
    # working set is larger (and which has a single row left to split)
    assert "; the floor is a piece of gradient_tape/Conv2DBackprop" in message
    assert ", split into 2 pieces: " in message
    cause = failure_cause(f"LMS: {message}")
    assert cause.startswith("memory of a piece of gradient_tape/Conv2DBackprop")


def test_auto_split_stops_before_a_round_would_pass_the_pieces_a_plan_may_have(monkeypatch, caplog):
    """A size whose rounds would need more pieces than a plan may have (each adds ops to the
    graph and time to the planning: ResNet50 4096² b1 in 400 MiB grew its planning process past
    13 GiB) gets no such round: the plan keeps the pieces it has, and says why it stopped."""
    case = workload_case("googlenet", 1024, 1)
    args = (case.step, case.images, case.labels)
    unbounded = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    assert unbounded.fits
    made = [s["pieces"] for s in unbounded.splits]
    monkeypatch.setattr(lms.split.fit, "MAX_PIECES", sum(made) // 2)
    with caplog.at_level(logging.INFO, logger="lms"):
        bounded = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    assert not bounded.fits
    assert sum(s["pieces"] for s in bounded.splits) <= sum(made) // 2
    assert "over the" in caplog.text and "lms.split.fit.MAX_PIECES" in caplog.text
