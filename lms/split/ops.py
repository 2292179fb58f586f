"""Split an operation too large for the device into pieces computed one after the other, so that
LMS reaches past the floor swapping alone cannot pass (docs/lms.md, "Splitting").

With swapping alone the step's device peak cannot drop below its largest operation's inputs and
outputs plus what stays resident, because an operation needs all of them on the device at once.
Split into k pieces along the batch (or, with a batch of 1, along the rows: axis 1, the depth of
a 3D tensor), piece p reads slices p of its inputs and writes slice p of its output, so only 1/k
of them is on the device at a time:

- each sliced input is kept on the host once (`keep`: one copy per tensor, shared by every split
  op that reads it) and read back a slice per piece (`read`); inputs that broadcast along the
  split axis (a bias, a scale) are read whole;
- each piece's output goes to the host into its place in one host array (`store`); a split op
  that reads it reads that array in place, other readers take it back whole (`assemble`), which
  the planner can serve with swaps as any tensor;
- the pieces run in sequence: piece p + 1 reads its slices only after piece p is stored.

The pieces are ordinary ops of the step's graph, added before it is analysed: the simulator,
the tuner and the closed loop see them as they see every op (lms/split/fit.py decides what to
split, only when no plan fits without it).

Split here: element-wise ops, ConcatV2, Tile, Slice, Pad, Sum and Mean, and the views of the
rows (Reshape, ExpandDims, Squeeze: rows kept, merged with the next axis or factored, as an
upsampling's repeat and its gradient do) (`layout`); window ops (convolutions, max and average
pooling and their gradients) along the batch here, and with a batch of 1 along the rows with
halos (lms/split/halo.py); Keras 2's fused batch norm and its gradient in passes
(lms/split/norm.py).
`splittable` says why an op is not split.
"""

import dataclasses
import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from lms import _tf_private
from lms.graph.names import HOST_ARRAYS, REWRITTEN_MARK, SPLIT_SCOPE
from lms.split.halo import RowLayout, row_layout
from lms.split.norm import FUSED_NORMS, NormLayout, norm_layout, split_norm

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
SCOPE = SPLIT_SCOPE


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


# Windowed ops split along the batch; with a batch of 1, along the rows with halos
# (lms/split/halo.py).
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
    "Tile": None,  # not along the split axis (_keeps_split_axis: an upsampling's repeat)
    "Slice": None,  # all of the split axis, or shifted (a concat's gradient, a pad's)
    "Pad": None,  # shifted along the split axis (_pad_layout: a zero padding's rows)
    "PadV2": None,
    "Sum": None,  # over the split axis (_reduction_layout: batch norm's moments, a bias's grad)
    "Mean": None,
    "Reshape": None,  # unit axes around the split axis (_reshape_layout)
    "ExpandDims": None,  # the same views of the rows with a unit axis inserted or removed
    "Squeeze": None,
}  # fmt: skip


@dataclass(frozen=True)
class Layout:
    """How an op splits: along `axis` of length `length`, each input read by its rule, the
    pieces' outputs combined by `combine`. (With a batch of 1, windowed ops split along the rows
    by lms/split/halo.py's RowLayout, which has the same fields and `piece`.)"""

    axis: int
    length: int
    rules: tuple  # per input: "slice", "whole" or "sizes"
    combine: str  # "assemble" or "sum"
    read_axis: int | None = None  # the inputs' axis when not `axis` (a reduction's)
    # rows per unit of [start, stop): of the inputs read (a Reshape that factors the rows into
    # (rows / f, f): output row r is input rows [r f, r f + f)) and of the output stored (one that
    # merges (rows, f) into rows f: unit u is output rows [u f, u f + f))
    read_rows: int = 1
    store_rows: int = 1

    @property
    def kept(self) -> tuple:
        """The inputs read in pieces from a host copy."""
        return tuple(i for i, rule in enumerate(self.rules) if rule == "slice")

    def piece(self, op, start: int, stop: int, read):
        """Piece [start, stop) of `op`; `read(i, lo, hi)` reads input i's slice [lo, hi)."""
        args = []
        for i, x in enumerate(op.inputs):
            if self.rules[i] == "slice":
                args.append(read(i, start * self.read_rows, stop * self.read_rows))
            elif self.rules[i] == "sizes":
                args.append(_piece_sizes(x, self.axis, (stop - start) * self.store_rows))
            else:
                args.append(x)
        return _tf_private.copy_op(op, args)


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


def static_value(tensor, limit: int = 32):
    """`tensor`'s value when a small subgraph of constants computes it (a pad's gradient slices
    from the paddings through Slice and Reshape, which tf.get_static_value does not follow), run
    once on its own; else None."""
    value = tf.get_static_value(tensor)
    if value is not None:
        return value
    ops, stack = {}, [tensor.op]
    while stack:
        op = stack.pop()
        if op.name in ops:
            continue
        if len(ops) >= limit or op.type == "Placeholder" or _tf_private.is_stateful(op):
            return None
        ops[op.name] = op
        stack.extend(t.op for t in op.inputs)
        if op.control_inputs:
            return None
    graph_def = tf.compat.v1.GraphDef()  # those ops alone, not the whole step serialized
    graph_def.node.extend(op.node_def for op in ops.values())
    with tf.Graph().as_default() as graph:
        tf.graph_util.import_graph_def(graph_def, name="")
        with tf.compat.v1.Session(graph=graph) as session:
            return session.run(tensor.name)


def _keeps_split_axis(op) -> "Layout | ShiftLayout | str":
    """Tile or Slice whose output has all of its input's split axis (so a multiple of 1, or
    a begin of 0 and the whole length, whether or not those are known statically): its input in
    slices; a Slice's size gets the piece's length. A Slice that cuts the split axis, with static
    bounds, shifts (ShiftLayout)."""
    shape = op.outputs[0].shape.as_list()
    axis = split_axis(shape)
    if axis is not None and op.inputs[0].shape[axis] == shape[axis]:
        rules = ("slice", "whole") if op.type == "Tile" else ("slice", "whole", "sizes")
        return Layout(axis, shape[axis], rules, "assemble")
    if op.type == "Tile" and axis is not None and op.inputs[0].shape[axis] == 1:
        return Layout(axis, shape[axis], ("whole", "sizes"), "assemble")  # a broadcast's rows
    if op.type == "Slice" and axis is not None:
        begin = static_value(op.inputs[1])
        if begin is not None:
            return ShiftLayout(axis, shape[axis], int(begin[axis]))
    return f"a {op.type} along the split axis, its bounds not known statically"


def _reduction_layout(op) -> "Layout | ReductionLayout | str":
    """Sum or Mean over axes that include the split axis of its input: the pieces' partial sums
    (a Mean's weighted by the piece's share of the rows) add up on the device. Over other axes:
    each piece reduces its own rows (read along the input's axis that becomes the output's split
    axis: an upsampling's gradient sums interleaved axes), assembled as any output."""
    axes = tf.get_static_value(op.inputs[1])
    shape, out = op.inputs[0].shape.as_list(), op.outputs[0].shape.as_list()
    if axes is None:
        return f"a {op.type} over axes not known statically"
    reduced = {int(a) % len(shape) for a in np.atleast_1d(axes)}
    axis = split_axis(shape)
    if axis is not None and axis in reduced:
        return ReductionLayout(axis, shape[axis])
    kept = list(range(len(shape)))
    kept = kept if op.get_attr("keep_dims") else [a for a in kept if a not in reduced]
    out_axis = split_axis(out)
    if out_axis is None or out_axis >= len(kept) or shape[kept[out_axis]] != out[out_axis]:
        return f"a {op.type} whose output has neither a batch nor rows above 1 of its input's"
    return Layout(out_axis, out[out_axis], ("slice", "whole"), "assemble", kept[out_axis])


@dataclass(frozen=True)
class ReductionLayout:
    """Sum or Mean along the split axis: each piece reduces its rows; the pieces are summed."""

    axis: int
    length: int
    combine: str = "sum"
    kept: tuple = (0,)

    def piece(self, op, start: int, stop: int, read):
        partial = _tf_private.copy_op(op, [read(0, start, stop), op.inputs[1]])
        if op.type == "Mean":
            partial = partial * tf.constant((stop - start) / self.length, partial.dtype)
        partial.set_shape(op.outputs[0].shape)
        return partial


def _leading_axis(shape: list) -> int | None:
    """The first axis above 1: with only ones before it, the slowest-varying one."""
    return next((a for a, n in enumerate(shape) if n != 1), None)


def _reshape_layout(op) -> "Layout | str":
    """Reshape that keeps the split axis whole with nothing but ones before it on both sides:
    each piece reshapes its own rows, read along the input's axis and stored along the
    output's. An upsampling's gradient does both: it views the rows of its input with unit axes
    inserted ([1, D, H, W, C] as [1, D, H, W/2, 2, C]), then with a unit axis before every axis
    ([1, 1, 1, D, 1, H, ...], a Tile's gradient: the rows are then the output's fourth axis).
    ExpandDims and Squeeze are such views too (their other input, an axis, read whole)."""
    shape, out = op.inputs[0].shape.as_list(), op.outputs[0].shape.as_list()
    rules = {"Reshape": ("slice", "sizes"), "ExpandDims": ("slice", "whole")}.get(
        op.type, ("slice",)
    )
    if op.type == "Squeeze" and not op.get_attr("squeeze_dims"):
        return "a Squeeze of every unit axis (a piece of one row would lose its axis too)"
    in_axis = _leading_axis(shape)
    out_axis = split_axis(out)
    out_axis = _leading_axis(out) if out_axis is None else out_axis
    if out_axis is None or in_axis is None or any(n != 1 for n in out[:out_axis]):
        return "a Reshape that moves rows across the split axis"
    rows, out_rows = shape[in_axis], out[out_axis]
    if rows == out_rows:
        return Layout(out_axis, out_rows, rules, "assemble", in_axis)
    # UpSampling's repeat: its forward merges (rows, f) into rows f, its gradient factors them
    factor = shape[in_axis + 1] if len(shape) > in_axis + 1 else 0
    if rows * factor == out_rows and shape[in_axis + 2 :] == out[out_axis + 1 :]:
        return Layout(out_axis, rows, rules, "assemble", in_axis, store_rows=factor)
    factor = out[out_axis + 1] if len(out) > out_axis + 1 else 0
    if out_rows * factor == rows and shape[in_axis + 1 :] == out[out_axis + 2 :]:
        return Layout(out_axis, out_rows, rules, "assemble", in_axis, read_rows=factor)
    return "a Reshape that moves rows across the split axis"


def _pad_layout(op) -> "ShiftLayout | str":
    """Pad or PadV2 with static paddings: output row r is input row r - (padding before)."""
    paddings = tf.get_static_value(op.inputs[1])
    shape = op.outputs[0].shape.as_list()
    axis = split_axis(shape)
    if paddings is None or axis is None:
        return "a Pad with paddings not known statically, or neither a batch nor rows above 1"
    return ShiftLayout(axis, shape[axis], -int(paddings[axis][0]))


@dataclass(frozen=True)
class ShiftLayout:
    """Pad and Slice along the split axis: piece [a, b) of the output is input rows
    [a + shift, b + shift), those outside the input filled as the op fills them (a Pad's
    constant); the op then pads or slices the other axes as it did."""

    axis: int
    length: int
    shift: int
    combine: str = "assemble"
    kept: tuple = (0,)

    def piece(self, op, start: int, stop: int, read):
        size = op.inputs[0].shape[self.axis]
        lo, hi = start + self.shift, stop + self.shift
        inside = read(0, max(lo, 0), min(hi, size))
        fill = op.inputs[2] if op.type == "PadV2" else tf.zeros([], inside.dtype)
        edges = [[0, 0]] * inside.shape.rank
        edges[self.axis] = [max(0, -lo), max(0, hi - size)]
        rows = tf.pad(inside, edges, constant_values=fill) if any(edges[self.axis]) else inside
        if op.type == "Slice":
            begin, sizes = op.inputs[1], op.inputs[2]
            at = tf.one_hot(self.axis, inside.shape.rank, dtype=begin.dtype)
            begin = begin * (1 - at)  # the piece's rows from its first
            sizes = sizes * (1 - at) + (stop - start) * at
            args = [rows, begin, sizes]
        else:
            paddings = tf.get_static_value(op.inputs[1]).copy()
            paddings[self.axis] = 0
            args = [rows, tf.constant(paddings, op.inputs[1].dtype), *op.inputs[2:]]
        piece = _tf_private.copy_op(op, args)
        shape = op.outputs[0].shape.as_list()
        shape[self.axis] = stop - start
        piece.set_shape(shape)
        return piece


def _batch_layout(op) -> Layout | RowLayout | str:
    special = {
        "ConcatV2": _concat_layout,
        "Tile": _keeps_split_axis,
        "Slice": _keeps_split_axis,
        "Pad": _pad_layout,
        "PadV2": _pad_layout,
        "Sum": _reduction_layout,
        "Mean": _reduction_layout,
        "Reshape": _reshape_layout,
        "ExpandDims": _reshape_layout,
        "Squeeze": _reshape_layout,
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


def layout(op) -> Layout | RowLayout | NormLayout | str:
    """How `op` splits, or why it cannot."""
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


@dataclass
class HostArray:
    """A split op's output on the host: its pieces' array and how many reads free it (the
    assemble's, and each later split op's pieces that read it in place)."""

    handle: object  # the last piece's store: the array's handle once every piece is in
    readers: list  # [count], read when the first piece creates the array
    released: bool = False  # the assemble's read taken back (no live reader of the whole)
    name: str = ""  # the op that creates it: the array's key in the graph's HOST_ARRAYS


class HostPieces:
    """The emulated device's piece copies: through the host store (lms/device/swap.py HostStore).
    A split op whose input is another split op's output reads that output's host array in place:
    a chain of split ops never has the whole tensor on the device between them."""

    keeps_ops = False  # numpy_functions are stateful: Grappler never removes them

    def __init__(self, store):
        self.store = store
        self._outputs = {}  # a split op's combined output (ref) -> its HostArray
        self._kept = {}  # a tensor kept on the host for split ops (ref) -> its HostArray
        self._keeps = {}  # those keeps' ops -> the same HostArrays
        self._gone = set()  # the ops no longer run: replaced by pieces, or keeps made moot
        self._traced = None  # (the step's ops before any split, those of them that run)

    def keep(self, tensor, readers: int):
        """`tensor` on the host for `readers` slice reads: a split op's output is there
        already; a tensor that another split op keeps is copied once for both."""
        host = self._outputs.get(tensor.ref()) or self._kept.get(tensor.ref())
        if host is not None:
            host.readers[0] += readers
            return host.handle
        count = [readers]  # read at run time, once every split op that reads it is counted
        handle = _handle(
            tf.numpy_function(
                lambda a: self.store.put_whole(a, count[0]), [tensor], tf.int64, stateful=True
            )
        )
        kept = HostArray(handle, count, name=handle.op.name)
        self._kept[tensor.ref()] = self._keeps[handle.op] = kept
        _hold(handle.op, kept.name, _bytes(tensor.shape.as_list(), tensor.dtype))
        return handle

    def read(self, kept, like, axis: int, start: int, stop: int):
        where = tf.constant([axis, start, stop], tf.int64)
        piece = tf.numpy_function(
            lambda h, w: self.store.get_slice(h, *w), [kept, where], like.dtype, stateful=True
        )
        shape = like.shape.as_list()
        shape[axis] = stop - start
        return _on_device(piece, shape)

    def store_piece(self, stored, piece, axis: int, start: int, shape: list):
        host = stored or HostArray(tf.constant([-1], tf.int64), [1])
        readers = host.readers  # read at run time, once the graph's reads are all counted
        where = tf.constant([axis, start, *shape], tf.int64)
        host.handle = _handle(
            tf.numpy_function(
                lambda h, p, w: self.store.put_slice(h, p, w[0], w[1], w[2:], readers[0]),
                [host.handle, piece, where],
                tf.int64,
                stateful=True,
            )
        )
        host.name = host.name or host.handle.op.name  # the first piece's store creates it
        _hold(host.handle.op, host.name, _bytes(shape, piece.dtype))
        return host

    def token(self, stored):
        """What the next piece waits for: this piece stored."""
        return stored.handle

    def assemble(self, stored, like, axis: int):
        whole = tf.numpy_function(self.store.get_whole, [stored.handle], like.dtype, stateful=True)
        whole = _on_device(whole, like.shape.as_list())
        self._outputs[whole.ref()] = stored
        return whole

    def replaced(self, op, whole) -> None:
        """`op` is now its pieces and `whole` their combined output. Split ops that read `op`'s
        output (split before it) read its host array in place from now on, and a split output
        that only split ops read is never assembled (TensorFlow prunes the assemble), so its
        read is taken back."""
        self._gone.add(op)
        host = self._outputs.get(whole.ref())  # None: a sum, on the device
        for reader in list(whole.consumers()) if host else ():
            if reader not in self._keeps:
                continue
            for consumer in list(reader.outputs[0].consumers()):
                for position, tensor in enumerate(consumer.inputs):
                    if tensor is reader.outputs[0]:
                        _tf_private.update_input(consumer, position, host.handle)
            _tf_private.move_control_outputs(reader, host.handle.op)  # first pieces' waits
            host.readers[0] += self._keeps.pop(reader).readers[0]
            self._gone.add(reader)
        for tensor in (*op.inputs, whole):
            host = self._outputs.get(tensor.ref())
            if host is None or host.released:
                continue
            if all(self._never_runs(reader) for reader in tensor.consumers()):
                host.readers[0] -= 1
                host.released = True

    def _never_runs(self, op) -> bool:
        """`op` is replaced by pieces, a keep made moot, or an op of the traced step that
        TensorFlow prunes (e.g. the gradient of the images, which nothing reads)."""
        if op in self._gone:
            return True
        if self._traced is None:  # the step as traced: which of its ops run does not change
            self._traced = (set(op.graph.get_operations()), running_ops(op.graph))
        traced, running = self._traced
        return op in traced and op not in running


class DevicePieces:
    """Pieces through TensorFlow's own copies (a GPU, or the two-device mode, lms/device/target.py):
    the input kept as a host copy (an Identity on the host device), each piece's slice cut on
    the host and copied to the compute device, each piece's result copied back, the output
    concatenated on the host. A piece's host slice waits for the previous piece's store, so its
    host-to-device copy (the send/recv after the slice) cannot start earlier. Every op made here
    is listed in `made`: the rewriter keeps them from Grappler as the step's control outputs."""

    keeps_ops = True

    def __init__(self, host_device: str = "/device:CPU:0", compute_device: str = "/device:GPU:0"):
        self.host_device, self.compute_device = host_device, compute_device
        self._outputs = {}  # a split op's combined output (ref) -> its host concat
        self.made = []  # every op made, for the step's control outputs

    def _made(self, tensor):
        self.made.append(tensor.op)
        return tensor

    def keep(self, tensor, readers: int):
        if tensor.ref() in self._outputs:  # another split op's output: read on the host
            return self._outputs[tensor.ref()]
        with tf.device(self.host_device):
            return self._made(tf.identity(tensor))

    def read(self, kept, like, axis: int, start: int, stop: int):
        with tf.device(self.host_device):
            index = [slice(None)] * like.shape.rank
            index[axis] = slice(start, stop)
            piece = self._made(kept[tuple(index)])
        with tf.device(self.compute_device):
            return self._made(tf.identity(piece))

    def store_piece(self, stored, piece, axis: int, start: int, shape: list):
        with tf.device(self.host_device):
            return [*(stored or []), self._made(tf.identity(piece))]

    def token(self, stored):
        return stored[-1]

    def assemble(self, stored, like, axis: int):
        with tf.device(self.host_device):
            host = self._made(tf.concat(stored, axis=axis))
        with tf.device(self.compute_device):
            whole = self._made(tf.identity(host))
        self._outputs[whole.ref()] = host
        return whole

    def replaced(self, op, whole) -> None:
        """Nothing to count: TensorFlow frees the host concat after its last reader. (Split
        ops that read `whole` and were split before it still copy it to the host.)"""


def _on_device(array, shape: list):
    """A py_func's result copied into TensorFlow's allocator (as a swap-in is: lms/device/swap.py),
    with the static shape the analysis sizes it by and Grappler needs. The shape is ensured on
    the host array and the copy comes last: the copy is then the device buffer its readers read
    directly, which the planner can swap out for a far reader (an alias after it would hide
    those readers from the planner: MobileNetV2 2048² b1's assembled outputs all stayed on the
    device, 899 MiB planned for a budget of 360)."""
    array.set_shape(shape)
    return tf.raw_ops.DeepCopy(x=tf.ensure_shape(array, shape))


def piece_scope(op_name: str) -> str:
    """The name scope of a split op's pieces (one level under SCOPE)."""
    return f"{SCOPE}/{op_name.replace('/', '_')}"


def _bytes(shape: list, dtype) -> int:
    return math.prod(shape) * dtype.size if None not in shape else 0


def _hold(op, array: str, size: int) -> None:
    """Note on `op`'s graph that `op` creates (or adds a piece to) the host array `array` of
    `size` bytes: the analysis counts the array in the host's memory from its first op to the
    last reader of any of its handles (`lms.graph.step.Analysis.host_arrays`)."""
    arrays = getattr(op.graph, HOST_ARRAYS, None)
    if arrays is None:
        arrays = {}
        setattr(op.graph, HOST_ARRAYS, arrays)
    arrays.setdefault(array, [size, []])[1].append(op.name)


def _handle(handle):
    """A host copy's handle: one int64 (so that the analysis sizes it, 8 bytes)."""
    handle.set_shape([1])
    return handle


def _piece_sizes(sizes, axis: int, rows: int):
    """A shape vector with its length along `axis` replaced by the piece's."""
    return tf.concat([sizes[:axis], tf.constant([rows], sizes.dtype), sizes[axis + 1 :]], 0)


def running_ops(graph) -> set:
    """The ops of a function graph that TensorFlow runs: those its outputs or control outputs
    depend on (as lms.graph.passes.mark_pruned finds them). Only those are split: a pruned
    op's pieces never run, so their reads of a host copy shared with other split ops would
    never come and the copy would never be freed."""
    if not hasattr(graph, "control_outputs"):
        return set(graph.get_operations())
    stack = [t.op for t in graph.outputs] + list(graph.control_outputs or [])
    found = set()
    while stack:
        op = stack.pop()
        if op in found:
            continue
        found.add(op)
        stack.extend(t.op for t in op.inputs)
        stack.extend(op.control_inputs)
    return found


SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})


def _constant_shapes(tensor) -> set:
    """The readers of `tensor` that read only its (static) shape are read as constants instead:
    else they would keep its assembled whole alive for nothing (Grappler folds them later, and an
    assemble it prunes would leave its host copy unread). Returns those readers."""
    replaced = set()
    for reader in list(tensor.consumers()):
        static = all(t.shape.is_fully_defined() for t in reader.inputs)
        if reader.type not in SHAPE_OPS or not static:
            continue
        with tensor.graph.as_default(), tf.control_dependencies(None):
            for k, output in enumerate(reader.outputs):
                shape = reader.inputs[k if reader.type == "ShapeN" else 0].shape
                value = {"Size": shape.num_elements(), "Rank": shape.rank}.get(reader.type)
                value = shape.as_list() if value is None else value
                constant = tf.constant(value, output.dtype)
                for consumer in list(output.consumers()):
                    for position, x in enumerate(consumer.inputs):
                        if x is output:
                            _tf_private.update_input(consumer, position, constant)
        replaced.add(reader)
    return replaced


def split_op(op, pieces: int, io, why: str = "") -> Split:
    """Replace `op` in its graph by `pieces` pieces computed in sequence (module docstring); its
    readers and the ops that wait for it read and wait for the combined output. `op` must be one
    that runs (`running_ops`); `io` must be the same for every op split in a graph."""
    found = layout(op)
    if isinstance(found, str):
        raise ValueError(f"cannot split {op.name}: {found}")
    graph, out = op.graph, op.outputs[0]
    setattr(graph, REWRITTEN_MARK, True)  # the next plan of this step traces it afresh
    axis = found.axis
    bounds = np.array_split(np.arange(found.length), max(2, min(pieces, found.length)))
    bounds = [(int(r[0]), int(r[-1]) + 1) for r in bounds]
    size = sum(
        (t.shape.num_elements() or 0) * t.dtype.size for t in (*op.inputs, *op.outputs)
    )  # (a batch norm's saved statistics for its gradient: no static shape, nothing on a CPU)
    scope = piece_scope(op.name)
    if isinstance(found, NormLayout):  # several outputs, and passes (lms/split/norm.py)
        with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
            replaced = split_norm(op, found, bounds, io, _constant_shapes)
        for old, whole, last in replaced:
            _tf_private.move_control_outputs(old, last)
            io.replaced(old, whole)
        return Split(op.name, op.type, len(bounds), axis, size, why)
    shapes = _constant_shapes(out)  # they go on reading `out`: pruned with it
    readers = [(c, i) for c in out.consumers() for i, x in enumerate(c.inputs) if x is out]
    readers = [(c, i) for c, i in readers if c not in shapes]
    with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
        kept = {i: io.keep(op.inputs[i], len(bounds)) for i in found.kept}

        read_axis = getattr(found, "read_axis", None)
        read_axis = axis if read_axis is None else read_axis

        def read(i, lo, hi):
            return io.read(kept[i], op.inputs[i], read_axis, lo, hi)

        # the first piece reads when every sliced input is on the host, not as soon as one is
        # (a read early in the step would hold its slice on the device until the piece runs)
        stored, total, previous = None, None, [h.op for h in kept.values()]
        for start, stop in bounds:
            with tf.control_dependencies(previous):
                piece = found.piece(op, start, stop, read)
            if found.combine == "sum":  # a filter's gradient: the pieces' contributions add up
                total = piece if total is None else total + piece
                previous = [total.op]
                continue
            rows = getattr(found, "store_rows", 1)
            stored = io.store_piece(stored, piece, axis, start * rows, out.shape.as_list())
            previous = [io.token(stored)]
        whole = total if found.combine == "sum" else io.assemble(stored, out, axis)
    for reader, position in readers:
        _tf_private.update_input(reader, position, whole)
    # the ops that waited for it wait for its last piece, and no longer for it (it is pruned,
    # never run); not for the assemble, which would then run for them alone
    last = whole.op if found.combine == "sum" else io.token(stored).op
    _tf_private.move_control_outputs(op, last)
    io.replaced(op, whole)
    return Split(op.name, op.type, len(bounds), axis, size, why)


# the share of the room one piece may take: an eighth (measured on GoogLeNet 1024² and 2048² b1
# and ResNet50 1024² b1, split="auto": a half or a quarter left plans over the budget that an
# eighth fits; the halo's extra rows stay a few per cent at these piece counts)
PIECE_SHARE = 1 / 8


def pieces_for(bytes_: int, room: int, limit: int) -> int:
    """How many pieces bring an op of `bytes_` under PIECE_SHARE of `room` (the rest of the
    step needs most of it), at least 2 and at most `limit` (the split axis's length)."""
    if room <= 0:
        return limit
    return max(2, min(limit, math.ceil(bytes_ / (PIECE_SHARE * room))))
