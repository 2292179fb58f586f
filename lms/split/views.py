"""The layouts of the ops around the window ops that move, view or reduce rows, so that a chain
of split ops is not broken where a network pads, slices, tiles, reshapes or sums: each piece
reads the input rows its output rows come from (lms/split/layouts.py dispatches here).

- Pad and Slice along the split axis shift the rows (`ShiftLayout`): piece [a, b) reads input
  rows [a + shift, b + shift), a Pad's constant outside the input;
- Tile and Slice that keep all of the split axis read their input in slices (`Layout`);
- Sum and Mean over the split axis add up the pieces' partial sums (`ReductionLayout`), over
  other axes each piece reduces its own rows;
- Reshape, ExpandDims and Squeeze that keep the rows apart (the views an upsampling's repeat and
  its gradient take) read and store whole rows, merged with the next axis or factored.
"""

from dataclasses import dataclass

import numpy as np
import tensorflow as tf

from lms import _tf_private
from lms.split.pieces import Layout, ReadAlongAxis, split_axis


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


def tile_or_slice_layout(op) -> "Layout | ShiftLayout | str":
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
            return ShiftLayout(axis, shape[axis], int(begin[axis]), op.inputs[0].shape[axis])
    return f"a {op.type} along the split axis, its bounds not known statically"


def reduction_layout(op) -> "Layout | ReductionLayout | str":
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
class ReductionLayout(ReadAlongAxis):
    """Sum or Mean along the split axis: each piece reduces its rows; the pieces are summed."""

    axis: int
    length: int
    combine: str = "sum"
    kept: tuple = (0,)

    def reads(self, start: int, stop: int) -> dict:
        return {0: (start, stop)}

    def form(self, start: int, stop: int) -> tuple:
        return ()

    def piece(self, op, start: int, stop: int, read):
        partial = _tf_private.copy_op(op, [read(0, start, stop), op.inputs[1]])
        if op.type == "Mean":
            partial = partial * tf.constant((stop - start) / self.length, partial.dtype)
        partial.set_shape(op.outputs[0].shape)
        return partial


def _leading_axis(shape: list) -> int | None:
    """The first axis above 1: with only ones before it, the slowest-varying one."""
    return next((a for a, n in enumerate(shape) if n != 1), None)


def reshape_layout(op) -> "Layout | str":
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


def pad_layout(op) -> "ShiftLayout | str":
    """Pad or PadV2 with static paddings: output row r is input row r - (padding before)."""
    paddings = tf.get_static_value(op.inputs[1])
    shape = op.outputs[0].shape.as_list()
    axis = split_axis(shape)
    if paddings is None or axis is None:
        return "a Pad with paddings not known statically, or neither a batch nor rows above 1"
    return ShiftLayout(axis, shape[axis], -int(paddings[axis][0]), op.inputs[0].shape[axis])


@dataclass(frozen=True)
class ShiftLayout(ReadAlongAxis):
    """Pad and Slice along the split axis: piece [a, b) of the output is input rows
    [a + shift, b + shift), those outside the input filled as the op fills them (a Pad's
    constant); the op then pads or slices the other axes as it did."""

    axis: int
    length: int
    shift: int
    size_in: int  # the input's rows along `axis`
    combine: str = "assemble"
    kept: tuple = (0,)

    def reads(self, start: int, stop: int) -> dict:
        """Input rows [a + shift, b + shift) within the input (none, for a piece all in a
        Pad's padding)."""
        lo = min(max(start + self.shift, 0), self.size_in)
        return {0: (lo, max(lo, min(stop + self.shift, self.size_in)))}

    def form(self, start: int, stop: int) -> tuple:
        """The rows filled before and after those read."""
        lo, hi = self.reads(start, stop)[0]
        before = min(max(lo - (start + self.shift), 0), stop - start)
        return before, stop - start - before - (hi - lo)

    def piece(self, op, start: int, stop: int, read):
        lo, hi = self.reads(start, stop)[0]
        inside = read(0, lo, hi)
        fill = op.inputs[2] if op.type == "PadV2" else tf.zeros([], inside.dtype)
        edges = [[0, 0]] * inside.shape.rank
        # the piece's rows before and after those inside the input (all of them, for a piece
        # all in a Pad's padding)
        before = min(max(lo - (start + self.shift), 0), stop - start)
        edges[self.axis] = [before, stop - start - before - (hi - lo)]
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
