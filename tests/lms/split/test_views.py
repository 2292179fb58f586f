"""lms/split/views.py: the ops that pad, slice, tile, reshape or sum rows around the window ops,
split, compute the same: a padding and its gradient's slice shifted, Keras 3's batch norm
statistics (Mean, Sum, Tile), an upsampling and its gradient, Reshapes that keep rows apart (and
those that do not, refused). Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from lms_equivalence import assert_close_gradients

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.layouts import BATCH_OPS, ELEMENTWISE_OPS, layout

pytestmark = pytest.mark.compat


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


@pytest.mark.parametrize("pieces", [3, 19])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_padding_and_its_gradients_slice_split_shifted(batch, pieces, split_every):
    """ResNet50's stem (ZeroPadding2D, a 7x7 stride-2 convolution) with its Pad, the Slice of
    its gradient and the convolutions split: piece rows [a, b) read input rows shifted by the
    padding (zeros outside), along the batch or the rows; the same outputs and gradients. In
    pieces of one row (19), some are all padding: they read no row."""
    inputs = keras.Input((14, 12, 3), batch_size=batch)
    padded = keras.layers.ZeroPadding2D(((3, 2), (1, 1)))(inputs)
    model = keras.Model(inputs, keras.layers.Conv2D(4, 7, strides=2)(padded))
    x = tf.random.stateless_normal([batch, 14, 12, 3], seed=(1, 2))
    step = _model_step(model)
    want = [t.numpy() for t in tf.function(step)(x)]
    concrete = tf.function(step).get_concrete_function(x)
    io = HostStore().pieces()
    kinds = ("Pad", "Slice", "Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    split = split_every(concrete.graph, io, lambda op: op.type in kinds, pieces)
    assert {"Pad", "Slice", "Conv2DBackpropInput"} <= set(split)
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
    assert io.store.held_bytes == 0


@pytest.mark.parametrize("batch", [1, 3])
def test_batch_norms_statistics_and_their_gradients_split_over_the_pieces(batch, split_every):
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
    io = HostStore().pieces()
    kinds = BATCH_OPS.keys() | ELEMENTWISE_OPS
    split = set(split_every(concrete.graph, io, lambda op: op.type in kinds))
    if not keras.__version__.startswith("2."):
        assert {"Mean", "Sum", "Tile", "SquaredDifference", "Conv2D"} <= split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
    assert_close_gradients([g.numpy() for g in got], want)
    assert io.store.held_bytes == 0


def test_an_upsampling_its_gradients_sums_and_a_skip_concat_split_along_the_depth(split_every):
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
    io = HostStore().pieces()
    kinds = ("Tile", "Slice", "ConcatV2", "Sum", "Reshape", "ExpandDims")
    split = split_every(concrete.graph, io, lambda op: op.type in kinds)
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


def test_reshapes_that_keep_rows_apart_split_and_the_others_do_not(split_every):
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
    io = HostStore().pieces()
    split = split_every(concrete.graph, io, lambda op: op.type in ("Reshape", "ExpandDims"))
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
