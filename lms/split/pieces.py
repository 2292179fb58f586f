"""The two interfaces a split op's pieces are made through, named so that `split_op`
(lms/split/rewrite.py) drives them by their members and a reader finds who implements them:

- `PieceLayout`: how an op splits and what one piece computes. `Layout` (here) reads each input
  by a rule; `ShiftLayout` and `ReductionLayout` (lms/split/views.py) shift or sum the rows;
  `RowLayout` (lms/split/halo.py) reads rows with halos. (A fused batch norm splits in passes
  instead: lms/split/norm.py's `NormLayout`, which `split_op` hands to `split_norm`.)
- `PieceCopies`: how the pieces' inputs reach the device and their outputs leave it, one tracker
  per graph. Implemented per device kind in the device layer beside that kind's swaps
  (lms/device/host_pieces.py `HostPieces`, lms/device/copies.py `DevicePieces`) and handed out by
  its mechanism (`Mechanism.pieces()`, lms/device/mechanism.py).

`Layout` lives here rather than with the other layouts because lms/split/views.py builds on it
and lms/split/layouts.py dispatches to views: both import it from below."""

import functools
from dataclasses import dataclass
from typing import Protocol

import tensorflow as tf

from lms import _tf_private
from lms.graph.pool_reads import max_pooled


class PieceLayout(Protocol):
    """How an op splits into pieces along `axis` (`split_op` cuts [0, length) into them)."""

    @property
    def axis(self) -> int:
        """The output's split axis (the batch, or the rows with a batch of 1)."""

    @property
    def length(self) -> int:
        """The rows along `axis` the pieces share out."""

    @property
    def kept(self) -> tuple:
        """The inputs (positions) kept on the host and read a slice per piece."""

    @property
    def combine(self) -> str:
        """How the pieces' outputs make the whole: "assemble" (each stored into its place in
        one host array) or "sum" (added up on the device: a filter's gradient, a reduction)."""

    @property
    def read_axis(self) -> int | None:
        """The kept inputs' axis the slices are cut along when it is not `axis`, else None."""

    @property
    def store_rows(self) -> int:
        """Output rows per unit of [start, stop) (a Reshape that merges rows: its factor)."""

    def piece(self, op, start: int, stop: int, read):
        """Piece [start, stop) of `op`, made in the current graph; `read(i, lo, hi)` gives rows
        [lo, hi) of kept input i on the device."""

    def reads(self, start: int, stop: int) -> dict:
        """The rows `piece(op, start, stop, read)` reads of each kept input, {position: (lo,
        hi)}, worked out without making it: what a chain's pieces are sized by
        (lms/split/chain.py) before any op is made."""

    def form(self, start: int, stop: int) -> tuple:
        """What of piece [start, stop)'s ops depends on where it lies besides the rows it
        reads (a window's padding, an average's scales): pieces of one form whose reads
        move alike are made alike, one loop for them (lms/split/looped.py)."""


class PieceCopies(Protocol):
    """A graph's piece copies: each split op's kept inputs on the host, their slices read back
    per piece, each piece's output stored on the host, the whole put together. One tracker for
    every op split in a graph (it joins a split op's output to the split ops that read it)."""

    keeps_ops: bool  # whether the ops it makes must be kept from Grappler (`finish`)
    # whether alike pieces may run as one loop (lms/split/looped.py): then `read_rows`,
    # `store_rows` and `resume` make a loop body's reads and stores
    loops: bool

    def keep(self, tensor, readers: int):
        """`tensor` kept on the host for `readers` slice reads; a tensor whose op the first
        piece waits for, and that `read` takes."""

    def read(self, kept, like, axis: int, start: int, stop: int):
        """Rows [start, stop) along `axis` of the kept `like`, on the device."""

    def store_piece(self, stored, piece, axis: int, start: int, shape: list):
        """`piece` stored at `start` along `axis` of the output of `shape`; `stored` is what the
        previous piece's store returned (None for the first). Returns the new `stored`."""

    def read_rows(self, kept, like, axis: int, starts: tuple, length: int, position):
        """`read` in a loop's body (lms/split/looped.py): rows [starts[i], starts[i] + length)
        along `axis` of the kept `like`, i the body's `position` (a tensor) among its pieces."""

    def store_rows(self, stored, piece, axis: int, starts: tuple, shape: list, position):
        """`store_piece` in a loop's body: `piece` at starts[i] along `axis`, i the body's
        `position`; `stored` was made by a piece before the loop. Returns the new `stored`."""

    def resume(self, stored, token) -> None:
        """The next store of `stored` follows `token` (what a loop carries for it)."""

    def token(self, stored):
        """A tensor the next piece waits for: the last store done."""

    def assemble(self, stored, like, axis: int):
        """The stored pieces as one tensor like `like` on the device (for readers not split)."""

    def replaced(self, op, whole) -> None:
        """`op` is now its pieces and `whole` their combined output (its readers rerouted); in a
        chain whose pieces nothing outside reads, `whole` is `op`'s own output, read by none."""

    def finish(self, graph) -> None:
        """Once the graph is split: what the mechanism needs before the step is rewritten and
        compiled (TensorFlow's copies: the ops made kept from Grappler)."""


class ReadAlongAxis:
    """The `read_axis` and `store_rows` of a PieceLayout that reads its inputs along its own
    `axis` and stores a row of output per row of [start, stop): every layout but some `Layout`s
    (a reduction's over other axes, a Reshape's)."""

    read_axis = None
    store_rows = 1


def split_axis(shape: list) -> int | None:
    """The batch (axis 0) when it is above 1, else the rows (axis 1) of an image or volume."""
    if shape and shape[0] > 1:
        return 0
    if len(shape) >= 3 and shape[1] > 1:
        return 1
    return None


@dataclass(frozen=True)
class Layout:
    """How an op splits: along `axis` of length `length`, each input read by its rule, the
    pieces' outputs combined by `combine` (a `PieceLayout`)."""

    axis: int
    length: int
    rules: tuple  # per input: "slice", "whole", "sizes" or "pooled" (lms/graph/pool_reads.py)
    combine: str  # "assemble" or "sum"
    read_axis: int | None = None  # the inputs' axis when not `axis` (a reduction's)
    # rows per unit of [start, stop): of the inputs read (a Reshape that factors the rows into
    # (rows / f, f): output row r is input rows [r f, r f + f)) and of the output stored (one that
    # merges (rows, f) into rows f: unit u is output rows [u f, u f + f))
    read_rows: int = 1
    store_rows: int = 1

    @functools.cached_property
    def kept(self) -> tuple:
        """The inputs read in pieces from a host copy (worked out once: a chain's pieces ask
        for it about 70 times a piece while their bounds are chosen)."""
        return tuple(i for i, rule in enumerate(self.rules) if rule == "slice")

    def reads(self, start: int, stop: int) -> dict:
        return {i: (start * self.read_rows, stop * self.read_rows) for i in self.kept}

    def form(self, start: int, stop: int) -> tuple:
        return ()

    def piece(self, op, start: int, stop: int, read):
        """Piece [start, stop) of `op`; `read(i, lo, hi)` reads input i's slice [lo, hi)."""
        args = []
        for i, x in enumerate(op.inputs):
            if self.rules[i] == "slice":
                args.append(read(i, start * self.read_rows, stop * self.read_rows))
            elif self.rules[i] == "sizes":
                args.append(_piece_sizes(x, self.axis, (stop - start) * self.store_rows))
            elif self.rules[i] == "pooled":  # its forward output, from the input read above
                args.append(max_pooled(op, args[0], op.get_attr("padding").decode()))
            else:
                args.append(x)
        return _tf_private.copy_op(op, args)


def _piece_sizes(sizes, axis: int, rows: int):
    """A shape vector with its length along `axis` replaced by the piece's."""
    return tf.concat([sizes[:axis], tf.constant([rows], sizes.dtype), sizes[axis + 1 :]], 0)
