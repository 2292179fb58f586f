"""lms/split/pieces.py: every layout split_op splits by has the members `PieceLayout` names
(halo.py's RowLayout and views.py's included), and `split_axis` takes the batch, else the rows.
Every layout's `reads(start, stop)` names exactly the rows of each kept input its `piece` reads,
for every op of steps that have each layout (window ops along the rows with halos and along the
batch, pads and slices shifted, reductions, reshapes, upsampling, concats), for pieces of every
size from one row: what a chain's pieces are sized by without making them
(lms/split/chain_size.py). Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import keras
import pytest
import tensorflow as tf
from split_steps import gradients_step

from lms.split.halo import RowLayout, Window
from lms.split.layouts import layout
from lms.split.looped import piece_bounds
from lms.split.norm import NormLayout
from lms.split.pieces import Layout, PieceLayout, split_axis
from lms.split.rewrite import running_ops
from lms.split.views import ReductionLayout, ShiftLayout

pytestmark = pytest.mark.compat

MEMBERS = {name for name in vars(PieceLayout) if not name.startswith("_")}


def test_every_piece_layout_has_the_members_split_op_uses():
    want = {
        "axis",
        "length",
        "kept",
        "combine",
        "read_axis",
        "store_rows",
        "piece",
        "reads",
        "form",
    }
    assert want == MEMBERS
    window = Window(size_in=9, size_out=9, extent=3, stride=1, before=1)
    layouts = [
        Layout(1, 6, ("slice", "whole"), "assemble", read_axis=3, store_rows=2),
        ShiftLayout(1, 6, -2, 4),
        ReductionLayout(0, 4),
        RowLayout("forward", (window,), (0,), "assemble"),
    ]
    for found in layouts:
        missing = [name for name in MEMBERS if not hasattr(found, name)]
        assert not missing, (type(found).__name__, missing)
    assert [(f.read_axis, f.store_rows) for f in layouts] == [(3, 2), *[(None, 1)] * 3]
    assert layouts[0].kept == (0,) and layouts[3].length == 9


def test_split_axis_is_the_batch_else_the_rows():
    assert split_axis([4, 1, 8, 3]) == 0
    assert split_axis([1, 16, 8, 3]) == 1
    assert split_axis([1, 1, 8, 3]) is None
    assert split_axis([1, 16]) is None  # no rows: a matrix of one row


def _gradients_step(model, shape):
    """The concrete step of sum(model(x)²)'s gradients for x and the weights."""
    return gradients_step(model).get_concrete_function(tf.TensorSpec(shape))


def _images(batch: int):
    """Padding, strided and dilated convolutions, a depthwise one, max and average pooling
    (SAME and VALID), a skip concat: 2D."""
    inputs = keras.Input((13, 11, 3), batch_size=batch)
    x = keras.layers.ZeroPadding2D(((3, 2), (1, 1)))(inputs)
    x = keras.layers.Conv2D(4, 7, strides=2, activation="relu")(x)
    x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)
    y = keras.layers.Conv2D(4, 3, padding="same", dilation_rate=2)(x)
    y = keras.layers.DepthwiseConv2D(3, padding="same")(y)
    x = keras.layers.Concatenate()([x, keras.layers.AveragePooling2D(3, 1, "same")(y)])
    x = keras.layers.AveragePooling2D(2)(keras.layers.BatchNormalization()(x))
    return _gradients_step(keras.Model(inputs, x), [batch, 13, 11, 3])


def _volume(batch: int):
    """A 3D U-Net's level: convolutions, a max pool, an upsampling and the skip's concat."""
    inputs = keras.Input((8, 6, 6, 2), batch_size=batch)
    skip = keras.layers.Conv3D(3, 3, padding="same", activation="relu")(inputs)
    down = keras.layers.Conv3D(4, 3, strides=2, padding="valid")(skip)
    up = keras.layers.UpSampling3D(2)(keras.layers.MaxPooling3D(2, padding="same")(skip))
    joined = keras.layers.Concatenate()([up, skip])
    out = keras.layers.Conv3D(2, 3, padding="same")(joined)
    return _gradients_step(keras.Model(inputs, [out, down]), [batch, 8, 6, 6, 2])


def _recording_read(op, found, reads: dict):
    """A `read` for `found.piece(op, ...)` that records the rows asked of each input and
    gives zeros of their shape."""
    axis = found.axis if found.read_axis is None else found.read_axis

    def read(i, lo, hi):
        reads[i] = (lo, hi)
        shape = op.inputs[i].shape.as_list()
        shape[axis] = max(hi - lo, 0)
        return tf.zeros(shape, op.inputs[i].dtype)

    return read


@pytest.mark.parametrize("batch", [1, 3], ids=["rows", "batch"])
@pytest.mark.parametrize("step", [_images, _volume], ids=["2d", "3d"])
def test_every_layouts_reads_are_the_rows_its_pieces_read(step, batch):
    concrete = step(batch)
    graph, seen = concrete.graph, set()
    running = running_ops(graph)
    for op in list(graph.get_operations()):
        found = layout(op) if op in running else "pruned"
        if isinstance(found, (str, NormLayout)):
            continue
        seen.add(type(found).__name__)
        for pieces in sorted({2, 3, found.length}):
            for start, stop in piece_bounds(found.length, pieces):
                recorded = {}
                with graph.as_default(), tf.control_dependencies(None):
                    found.piece(op, start, stop, _recording_read(op, found, recorded))
                assert found.reads(start, stop) == recorded, (op.name, op.type, start, stop)
    want = {"Layout"} | ({"RowLayout"} if batch == 1 else set())
    if step is _images:  # the padding's rows; Keras 3's batch norm moments (Keras 2 fuses it)
        want.add("ShiftLayout")
        want |= set() if keras.__version__.startswith("2.") else {"ReductionLayout"}
    assert want <= seen, seen
