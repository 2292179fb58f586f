"""Split an operation too large for the device into pieces computed one after the other, so that
LMS reaches past the floor swapping alone cannot pass (docs/lms.md, "Splitting").

With swapping alone the step's device peak cannot drop below its largest operation's inputs and
outputs plus what stays resident, because an operation needs all of them on the device at once.
Split into k pieces along the batch (or, with a batch of 1, along the rows: axis 1, the depth of
a 3D tensor), piece p reads slices p of its inputs and writes slice p of its output, so only 1/k
of them is on the device at a time:

- each input that has the output's shape is kept on the host once (`keep`) and read back a slice
  per piece (`read`); inputs that broadcast along the split axis (a bias, a scale) are read whole;
- each piece's output goes to the host into its place in one host array (`store`), which the
  op's readers then take back whole (`assemble`): the whole output exists on the device only for
  its readers, whom the planner can serve with swaps as any tensor;
- the pieces run in sequence: piece p + 1 reads its slices only after piece p is stored.

The pieces are ordinary ops of the step's graph, added before it is analysed: the simulator,
the tuner and the closed loop see them as they see every op (how many pieces, on which axis, is
the new lever: `lms/api.py` splits the floor's op only when no plan fits without it).

This version splits element-wise operations (along the batch or the rows: Keras 3 ResNet50's
AddN floor) and convolutions, pooling and their gradients along the batch (a filter's gradient
is the sum of the pieces'); with a batch of 1 those need halos along the rows, and batch norm
statistics across pieces: not split yet (`splittable` says why).
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from lms import _tf_private

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
SCOPE = "lms_split"


@dataclass(frozen=True)
class Split:
    """One split: which op, into how many pieces, along which axis, and why."""

    op: str
    op_type: str
    pieces: int
    axis: int
    bytes: int  # the op's inputs and outputs, whole
    why: str = ""

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def split_axis(shape: list) -> int | None:
    """The batch (axis 0) when it is above 1, else the rows (axis 1) of an image or volume."""
    if shape and shape[0] > 1:
        return 0
    if len(shape) >= 3 and shape[1] > 1:
        return 1
    return None


# Windowed ops split along the batch only (a batch of 1 needs halos along the rows: not yet).
# How each input is read per piece ("slice": its batch slice, "whole", "sizes": a shape vector
# whose batch becomes the piece's) and how the pieces' outputs combine ("assemble" on the host,
# "sum": a filter's gradient, summed on the device as the batch's contributions are).
_FORWARD, _POOL = (("slice", "whole"), "assemble"), (("slice",), "assemble")
_POOL_GRAD, _AVG_POOL_GRAD = (("slice",) * 3, "assemble"), (("sizes", "slice"), "assemble")
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
}  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """How an op splits: along `axis` of length `length`, each input read by its rule, the
    pieces' outputs combined by `combine`."""

    axis: int
    length: int
    rules: tuple  # per input: "slice", "whole" or "sizes"
    combine: str  # "assemble" or "sum"


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
    """ConcatV2 along any axis but the batch: its values in batch slices, its axis whole."""
    axis = tf.get_static_value(op.inputs[-1])
    rank = op.outputs[0].shape.rank
    if axis is None or int(axis) % rank == 0:
        return "a ConcatV2 along the batch or along an axis not known statically"
    batch = op.outputs[0].shape[0]
    if batch < 2:
        return "a ConcatV2 with a batch of 1 is not split yet"
    return Layout(0, batch, ("slice",) * (len(op.inputs) - 1) + ("whole",), "assemble")


def _batch_layout(op) -> Layout | str:
    if op.type == "ConcatV2":
        return _concat_layout(op)
    rules, combine = BATCH_OPS[op.type]
    if len(rules) != len(op.inputs):
        return f"{op.type} with {len(op.inputs)} inputs is not a form split knows"
    batch = op.inputs[rules.index("slice")].shape[0]
    if batch is None or batch < 2:
        return (
            f"{op.type} with a batch of 1 needs halos along the rows, which split does not do yet "
            "(it splits such ops along the batch)"
        )
    return Layout(0, batch, rules, combine)


def layout(op) -> Layout | str:
    """How `op` splits, or why it cannot."""
    if op.type not in ELEMENTWISE_OPS and op.type not in BATCH_OPS:
        return (
            f"{op.type} is not split yet (element-wise ops are, and convolutions, pooling and "
            "their gradients along the batch; batch norm needs statistics across pieces)"
        )
    if len(op.outputs) != 1 or not op.outputs[0].shape.is_fully_defined():
        return "its output has no static shape"
    if any(not t.shape.is_fully_defined() for t in op.inputs):
        return "an input has no static shape"
    if any(op.outputs[0] is t for t in op.graph.outputs):
        return "its output is the step's output"
    return _elementwise_layout(op) if op.type in ELEMENTWISE_OPS else _batch_layout(op)


def splittable(op) -> str | None:
    """None when `op` can be split here, else why not (said in the plan's explanation)."""
    found = layout(op)
    return found if isinstance(found, str) else None


class HostPieces:
    """The emulated device's piece copies: through the host store (lms/swap.py HostStore)."""

    def __init__(self, store):
        self.store = store

    def keep(self, tensor, readers: int):
        count = tf.constant([readers], tf.int64)
        return tf.numpy_function(
            lambda a, r: self.store.put_whole(a, r[0]), [tensor, count], tf.int64, stateful=True
        )

    def read(self, kept, like, axis: int, start: int, stop: int):
        where = tf.constant([axis, start, stop], tf.int64)
        piece = tf.numpy_function(
            lambda h, w: self.store.get_slice(h, *w), [kept, where], like.dtype, stateful=True
        )
        shape = like.shape.as_list()
        shape[axis] = stop - start
        return _on_device(piece, shape)

    def store_piece(self, stored, piece, axis: int, start: int, shape: list, readers: int):
        handle = tf.constant([-1], tf.int64) if stored is None else stored
        where = tf.constant([axis, start, readers, *shape], tf.int64)
        return tf.numpy_function(
            lambda h, p, w: self.store.put_slice(h, p, w[0], w[1], w[3:], w[2]),
            [handle, piece, where],
            tf.int64,
            stateful=True,
        )

    def assemble(self, stored, like, axis: int):
        whole = tf.numpy_function(self.store.get_whole, [stored], like.dtype, stateful=True)
        return _on_device(whole, like.shape.as_list())


class DevicePieces:
    """A GPU's piece copies: slices of a host copy (the CPU device) and pieces concatenated on
    the host. Only a GPU runs this path: on a CPU the host copy is the same memory."""

    def __init__(self, host_device: str = "/device:CPU:0"):
        self.host_device = host_device

    def keep(self, tensor, readers: int):
        with tf.device(self.host_device):
            return tf.identity(tensor)

    def read(self, kept, like, axis: int, start: int, stop: int):
        with tf.device(self.host_device):
            index = [slice(None)] * like.shape.rank
            index[axis] = slice(start, stop)
            piece = kept[tuple(index)]
        with tf.device(like.device):
            return tf.identity(piece)

    def store_piece(self, stored, piece, axis: int, start: int, shape: list, readers: int):
        with tf.device(self.host_device):
            return [*(stored or []), tf.identity(piece)]

    def assemble(self, stored, like, axis: int):
        with tf.device(self.host_device):
            whole = tf.concat(stored, axis=axis)
        with tf.device(like.device):
            return tf.identity(whole)


def _on_device(array, shape: list):
    """A py_func's result copied into TensorFlow's allocator (as a swap-in is: lms/swap.py),
    with the static shape Grappler needs."""
    copy = tf.raw_ops.DeepCopy(x=array)
    return tf.ensure_shape(copy, shape)


def _piece_op(op, inputs):
    """A copy of `op` (type and attributes) over `inputs`."""
    attrs = {key: op.node_def.attr[key] for key in op.node_def.attr}
    created = _tf_private.create_op(op.graph, op.type, inputs, [t.dtype for t in op.outputs], attrs)
    return created.outputs[0]


def _piece_sizes(sizes, rows: int):
    """A shape vector with its batch replaced by the piece's."""
    return tf.concat([tf.constant([rows], sizes.dtype), sizes[1:]], 0)


def split_op(op, pieces: int, io, why: str = "") -> Split:
    """Replace `op` in its graph by `pieces` pieces computed in sequence (module docstring); its
    readers and the ops that wait for it read and wait for the combined output."""
    found = layout(op)
    if isinstance(found, str):
        raise ValueError(f"cannot split {op.name}: {found}")
    graph, out = op.graph, op.outputs[0]
    axis, rules = found.axis, found.rules
    bounds = np.array_split(np.arange(found.length), max(2, min(pieces, found.length)))
    bounds = [(int(r[0]), int(r[-1]) + 1) for r in bounds]
    readers = [(c, i) for c in out.consumers() for i, x in enumerate(c.inputs) if x is out]
    size = sum(t.shape.num_elements() * t.dtype.size for t in (*op.inputs, out))
    scope = f"{SCOPE}/{op.name.replace('/', '_')}"
    with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
        kept = {i: io.keep(x, len(bounds)) for i, x in enumerate(op.inputs) if rules[i] == "slice"}
        stored, total, previous = None, None, []
        for start, stop in bounds:
            with tf.control_dependencies(previous):
                args = []
                for i, x in enumerate(op.inputs):
                    if rules[i] == "slice":
                        args.append(io.read(kept[i], x, axis, start, stop))
                    elif rules[i] == "sizes":
                        args.append(_piece_sizes(x, stop - start))
                    else:
                        args.append(x)
            piece = _piece_op(op, args)
            if found.combine == "sum":  # a filter's gradient: the batch's contributions add up
                total = piece if total is None else total + piece
                previous = [total.op]
                continue
            stored = io.store_piece(stored, piece, axis, start, out.shape.as_list(), 1)
            previous = [stored[-1] if isinstance(stored, list) else stored]
        whole = total if found.combine == "sum" else io.assemble(stored, out, axis)
    for reader, position in readers:
        _tf_private.update_input(reader, position, whole)
    # the ops that waited for it wait for the combined output, and no longer for it (it is
    # pruned, never run)
    _tf_private.move_control_outputs(op, whole.op)
    return Split(op.name, op.type, len(bounds), axis, size, why)


def pieces_for(bytes_: int, room: int, limit: int) -> int:
    """How many pieces bring an op of `bytes_` under half of `room` (the rest of the step needs
    some of it too), at least 2 and at most `limit` (the split axis's length)."""
    if room <= 0:
        return limit
    return max(2, min(limit, math.ceil(2 * bytes_ / room)))
