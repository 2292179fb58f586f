"""What LMS can split and how each input of a piece is read (docs/lms.md, "Splitting"): `layout`
says how an op splits, or why it cannot (`splittable`), as a `PieceLayout` (lms/split/pieces.py)
that `split_op` (lms/split/rewrite.py) makes the pieces by.

Split here: element-wise ops, ConcatV2 along an axis not split, and the ops of `BATCH_OPS`:
window ops (convolutions, max and average pooling and their gradients) along the batch, and with
a batch of 1 along the rows with halos (lms/split/halo.py); the views and sums around them (Tile,
Slice, Pad, Sum, Mean, Reshape, ExpandDims, Squeeze: lms/split/views.py); Keras 2's fused batch
norm and its gradient in passes (lms/split/norm.py). Each splits along the batch when it is above
1, else along the rows (axis 1, the depth of a volume: `split_axis`).
"""

import tensorflow as tf

from lms.split.halo import row_layout
from lms.split.norm import FUSED_NORMS, NormLayout, norm_layout
from lms.split.pieces import Layout, PieceLayout, split_axis
from lms.split.views import (
    pad_layout,
    reduction_layout,
    reshape_layout,
    tile_or_slice_layout,
)

# one output, computed element by element from inputs of its shape or broadcast to it
ELEMENTWISE_OPS = frozenset(
    {
        "Abs", "Add", "AddN", "AddV2", "BiasAdd", "Cast", "Elu", "EluGrad", "Exp", "LeakyRelu",
        "LeakyReluGrad", "Log", "Maximum", "Minimum", "Mul", "Neg", "RealDiv", "Relu", "Relu6",
        "Relu6Grad", "ReluGrad", "Rsqrt", "Selu", "SeluGrad", "Sigmoid", "SigmoidGrad",
        "Softplus", "SoftplusGrad", "Sqrt", "Square", "SquaredDifference", "Sub", "Tanh",
        "TanhGrad",
    }
)  # fmt: skip


# Windowed ops split along the batch; with a batch of 1, along the rows with halos
# (lms/split/halo.py). How each input is read per piece ("slice": its batch slice, "whole",
# "sizes": a shape vector whose batch becomes the piece's, "pooled": a max pool's output
# recomputed from the piece's input, lms/graph/pool_reads.py) and how the pieces' outputs
# combine ("assemble" on the host, "sum": a filter's gradient, summed on the device as the
# batch's contributions are).
_FORWARD, _POOL = (("slice", "whole"), "assemble"), (("slice",), "assemble")
_POOL_GRAD = (("slice", "pooled", "slice"), "assemble")
_AVG_POOL_GRAD = (("sizes", "slice"), "assemble")
_INPUT_GRAD = (("sizes", "whole", "slice"), "assemble")
_FILTER_GRAD = (("slice", "whole", "slice"), "sum")
BATCH_OPS = {
    "Conv2D": _FORWARD, "Conv3D": _FORWARD, "DepthwiseConv2dNative": _FORWARD,
    "MaxPool": _POOL, "MaxPool3D": _POOL, "AvgPool": _POOL, "AvgPool3D": _POOL,
    "MaxPoolGrad": _POOL_GRAD, "MaxPool3DGrad": _POOL_GRAD,
    "AvgPoolGrad": _AVG_POOL_GRAD, "AvgPool3DGrad": _AVG_POOL_GRAD,
    "Conv2DBackpropInput": _INPUT_GRAD, "Conv3DBackpropInputV2": _INPUT_GRAD,
    "DepthwiseConv2dNativeBackpropInput": _INPUT_GRAD,
    "Conv2DBackpropFilter": _FILTER_GRAD, "Conv3DBackpropFilterV2": _FILTER_GRAD,
    "DepthwiseConv2dNativeBackpropFilter": _FILTER_GRAD,
    "BiasAddGrad": (("slice",), "sum"),  # a bias's gradient: a sum over the batch and pixels
    "ConcatV2": None,  # its values along the batch, its axis whole (_concat_layout)
    "Tile": None,  # not along the split axis (views.tile_or_slice_layout: an upsampling's repeat)
    "Slice": None,  # all of the split axis, or shifted (a concat's gradient, a pad's)
    "Pad": None,  # shifted along the split axis (views.pad_layout: a zero padding's rows)
    "PadV2": None,
    "Sum": None,  # over the split axis (views.reduction_layout: batch norm's moments, bias grads)
    "Mean": None,
    "Reshape": None,  # unit axes around the split axis (views.reshape_layout)
    "ExpandDims": None,  # the same views of the rows with a unit axis inserted or removed
    "Squeeze": None,
}  # fmt: skip


def _elementwise_layout(op) -> Layout | str:
    """Inputs of the output's shape read in slices, those that broadcast along the axis whole."""
    shape = op.outputs[0].shape.as_list()
    axis = split_axis(shape)
    if axis is None:
        return "its output has neither a batch nor rows above 1"
    rules = []
    for tensor in op.inputs:
        dims = tensor.shape.as_list()
        if dims == shape:
            rules.append("slice")
            continue
        aligned = axis - (len(shape) - len(dims))  # numpy's broadcasting aligns the last axes
        if aligned >= 0 and dims[aligned] != 1:
            return f"input {tensor.name} {dims} neither matches nor broadcasts along axis {axis}"
        rules.append("whole")
    if "slice" not in rules:
        return "no input has the output's shape"
    return Layout(axis, shape[axis], tuple(rules), "assemble")


def _concat_layout(op) -> Layout | str:
    """ConcatV2 along any axis but the one split: its values in slices, its axis whole."""
    axis = tf.get_static_value(op.inputs[-1])
    shape = op.outputs[0].shape.as_list()
    split = split_axis(shape)
    if axis is None or split is None or int(axis) % len(shape) == split:
        return "a ConcatV2 along the split axis or along an axis not known statically"
    return Layout(split, shape[split], ("slice",) * (len(op.inputs) - 1) + ("whole",), "assemble")


def _batch_layout(op) -> PieceLayout | str:
    special = {
        "ConcatV2": _concat_layout,
        "Tile": tile_or_slice_layout,
        "Slice": tile_or_slice_layout,
        "Pad": pad_layout,
        "PadV2": pad_layout,
        "Sum": reduction_layout,
        "Mean": reduction_layout,
        "Reshape": reshape_layout,
        "ExpandDims": reshape_layout,
        "Squeeze": reshape_layout,
    }
    if op.type in special:
        return special[op.type](op)
    rules, combine = BATCH_OPS[op.type]
    if len(rules) != len(op.inputs):
        return f"{op.type} with {len(op.inputs)} inputs is not a form split knows"
    sliced = op.inputs[rules.index("slice")].shape.as_list()
    if sliced[0] > 1:
        return Layout(0, sliced[0], rules, combine)
    if op.type == "BiasAddGrad":  # a sum over the pixels too: along the rows as well
        axis = split_axis(sliced)
        if axis is None:
            return "a BiasAddGrad with neither a batch nor rows above 1"
        return Layout(axis, sliced[axis], rules, combine)
    return row_layout(op)  # with a batch of 1, along the rows with halos (lms/split/halo.py)


def layout(op) -> PieceLayout | NormLayout | str:
    """How `op` splits (a `PieceLayout`: `Layout`, `ShiftLayout`, `ReductionLayout`, halo.py's
    `RowLayout`; a fused batch norm's `NormLayout`), or why it cannot."""
    norm = op.type in FUSED_NORMS
    if op.type not in ELEMENTWISE_OPS and op.type not in BATCH_OPS and not norm:
        return (
            f"{op.type} is not split yet (element-wise ops are, convolutions, pooling, batch "
            "norm and their gradients, and the views and sums around them)"
        )
    if (len(op.outputs) != 1 and not norm) or not op.outputs[0].shape.is_fully_defined():
        return "its output has no static shape"
    if not op.outputs[0].dtype.is_floating:
        return "its output is not floating-point data (indices or shape arithmetic)"
    inputs = op.inputs[:3] if norm else op.inputs  # (a gradient's saved statistics: no shape)
    if any(not t.shape.is_fully_defined() for t in inputs):
        return "an input has no static shape"
    if any(op.outputs[0] is t for t in op.graph.outputs):
        return "its output is the step's output"
    if norm:
        return norm_layout(op, split_axis(op.inputs[FUSED_NORMS[op.type]].shape.as_list()))
    return _elementwise_layout(op) if op.type in ELEMENTWISE_OPS else _batch_layout(op)


def splittable(op) -> str | None:
    """None when `op` can be split here, else why not (said in the plan's explanation)."""
    found = layout(op)
    return found if isinstance(found, str) else None
