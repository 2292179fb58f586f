"""Split an operation too large for the device into pieces computed one after the other, so that
LMS reaches past the floor swapping alone cannot pass (docs/lms.md, "Splitting").

With swapping alone the step's device peak cannot drop below its largest operation's inputs and
outputs plus what stays resident, because an operation needs all of them on the device at once.
Split into k pieces along the batch (or, with a batch of 1, along the rows: axis 1, the depth of
a 3D tensor), piece p reads slices p of its inputs and writes slice p of its output, so only 1/k
of them is on the device at a time. `split_op` rewrites the op by its `PieceLayout` (what a
piece computes: lms/split/layouts.py) through the graph's `PieceCopies` (how the data moves: the
mechanism's, lms/device):

- each sliced input is kept on the host once (`keep`: one copy per tensor, shared by every split
  op that reads it) and read back a slice per piece (`read`); inputs that broadcast along the
  split axis (a bias, a scale) are read whole;
- each piece's output goes to the host into its place in one host array (`store_piece`); a split
  op that reads it reads that array in place, other readers take it back whole (`assemble`),
  which the planner can serve with swaps as any tensor;
- the pieces run in sequence: piece p + 1 reads its slices only after piece p is stored
  (`token`).

The pieces are ordinary ops of the step's graph, added before it is analysed: the simulator,
the tuner and the closed loop see them as they see every op (lms/split/fit.py decides what to
split, only when no plan fits without it, and how many pieces: `pieces_for`).
"""

import dataclasses
import math
from dataclasses import dataclass

import tensorflow as tf

from lms import _tf_private
from lms.graph.names import REWRITTEN_MARK, SPLIT_SCOPE
from lms.split.layouts import layout
from lms.split.looped import Carried, looped_bounds, make_pieces, read, store
from lms.split.norm import NormLayout, split_norm
from lms.split.pieces import PieceCopies

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
    chained_after: str = ""  # the split op whose pieces it reads on the device (lms/split/chain.py)
    side: bool = False  # it sums over `chained_after`'s rows in that op's chain (a side op)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def piece_scope(op_name: str) -> str:
    """The name scope of a split op's pieces (one level under SCOPE)."""
    return f"{SCOPE}/{op_name.replace('/', '_')}"


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


def constant_shapes(tensor) -> set:
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


def op_bytes(op) -> int:
    """`op`'s inputs and outputs, whole (a batch norm's saved statistics for its gradient: no
    static shape, nothing on a CPU)."""
    return sum((t.shape.num_elements() or 0) * t.dtype.size for t in (*op.inputs, *op.outputs))


def value_readers(out) -> list:
    """(reader, input position) of each op that reads `out`'s values, once its shape readers
    read constants (`constant_shapes`: they go on reading `out`, pruned with it)."""
    shapes = constant_shapes(out)
    readers = [(c, i) for c in out.consumers() for i, x in enumerate(c.inputs) if x is out]
    return [(c, i) for c, i in readers if c not in shapes]


def split_op(op, pieces: int, io: PieceCopies, why: str = "") -> Split:
    """Replace `op` in its graph by `pieces` pieces computed in sequence (module docstring); its
    readers and the ops that wait for it read and wait for the combined output. `op` must be one
    that runs (`running_ops`); `io` must be the same for every op split in a graph."""
    found = layout(op)
    if isinstance(found, str):
        raise ValueError(f"cannot split {op.name}: {found}")
    graph, out = op.graph, op.outputs[0]
    setattr(graph, REWRITTEN_MARK, True)  # the next plan of this step traces it afresh
    axis = found.axis
    loops = io.loops and not isinstance(found, NormLayout)
    bounds, calls = _bounds(found, pieces, io)
    size = op_bytes(op)
    scope = piece_scope(op.name)
    if isinstance(found, NormLayout):  # several outputs, and passes (lms/split/norm.py)
        with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
            replaced = split_norm(op, found, bounds, io, constant_shapes)
        for old, whole, last in replaced:
            _tf_private.move_control_outputs(old, last)
            io.replaced(old, whole)
        return Split(op.name, op.type, len(bounds), axis, size, why)
    readers = value_readers(out)
    with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
        kept = {i: io.keep(op.inputs[i], len(bounds)) for i in found.kept}
        read_axis = axis if found.read_axis is None else found.read_axis
        rows, shape = found.store_rows, out.shape.as_list()
        # the first piece reads when every sliced input is on the host, not as soon as one is
        # (a read early in the step would hold its slice on the device until the piece runs)
        run = _Run([h.op for h in kept.values()], io)

        def make(p, looped):
            start, stop = bounds[p]

            def read_rows(i, lo, hi):
                return read(io, looped, ("read", i), kept[i], op.inputs[i], read_axis, lo, hi)

            with tf.control_dependencies(run.previous):
                piece = found.piece(op, start, stop, read_rows)
            piece.set_shape(piece_shape(found, out, start, stop))
            if found.combine == "sum":  # a filter's gradient: the pieces' contributions add up
                run.total = piece if run.total is None else run.total + piece
            else:
                run.stored = store(
                    io, looped, ("store",), run.stored, piece, axis, start * rows, shape
                )
            run.previous = run.get()

        make_pieces(len(bounds), make, calls, run, loops)
        whole = run.total if found.combine == "sum" else io.assemble(run.stored, out, axis)
    for reader, position in readers:
        _tf_private.update_input(reader, position, whole)
    # the ops that waited for it wait for its last piece, and no longer for it (it is pruned,
    # never run); not for the assemble, which would then run for them alone
    last = whole.op if found.combine == "sum" else io.token(run.stored).op
    _tf_private.move_control_outputs(op, last)
    io.replaced(op, whole)
    return Split(op.name, op.type, len(bounds), axis, size, why)


def planned_split(op, pieces: int, io: PieceCopies, why: str = "") -> Split:
    """The Split `split_op` would make of `op`, its pieces counted as it counts them, without
    making anything (a plan only reported: lms/split/fit.py `split_modelled`)."""
    found = layout(op)
    if isinstance(found, str):
        raise ValueError(f"cannot split {op.name}: {found}")
    bounds, _ = _bounds(found, pieces, io)
    return Split(op.name, op.type, len(bounds), found.axis, op_bytes(op), why)


def _bounds(found, pieces: int, io: PieceCopies) -> tuple[list, list]:
    """The pieces' bounds and calls of an op of layout `found` (lms/split/looped.py
    `looped_bounds`; a batch norm's pieces do not loop)."""
    loops = io.loops and not isinstance(found, NormLayout)
    return looped_bounds(
        found.length, pieces, lambda cut: [piece_calls(found, *b) for b in cut], loops
    )


def piece_shape(found, out, start: int, stop: int) -> list:
    """The static shape of piece [start, stop) of `out` by layout `found`: in a loop's body the
    outer tensors a piece reads are the body's inputs, not constants, and shape inference can
    lose what they said (a sizes vector, a filter's shape)."""
    shape = out.shape.as_list()
    if found.combine != "sum":
        shape[found.axis] = (stop - start) * found.store_rows
    return shape


class _Run(Carried):
    """A split op's pieces as they are made: what the next piece waits for, and what a loop
    carries (lms/split/looped.py): the output's host array's last store, or the running sum."""

    def __init__(self, previous: list, io: PieceCopies):
        self.previous, self.io, self.stored, self.total = previous, io, None, None

    def get(self) -> list:
        return [self.total] if self.total is not None else [self.io.token(self.stored)]

    def set(self, tensors: list) -> None:
        if self.total is not None:
            self.total = tensors[0]
        else:
            self.io.resume(self.stored, tensors[0])
        self.previous = [t.op for t in tensors]

    def ready(self) -> bool:
        return self.total is not None or self.stored is not None

    def after(self, p: int) -> None:
        """Nothing kept in Python changes from piece to piece."""


def piece_calls(found, start: int, stop: int) -> dict:
    """Piece [start, stop)'s reads and store, {key: (start, length)} (lms/split/looped.py)."""
    calls = {("read", i): (lo, hi - lo) for i, (lo, hi) in found.reads(start, stop).items()}
    calls[("rows",)] = (start, stop - start)
    calls[("form",)] = (0, found.form(start, stop))
    if found.combine != "sum":
        rows = found.store_rows
        calls[("store",)] = (start * rows, (stop - start) * rows)
    return calls


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
