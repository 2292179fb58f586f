"""A chain's pieces made (lms/split/chain.py decides the chains; docs/lms.md, "Splitting"):
piece p of the chain is its last op's piece p, whose read of the op before it is that op's piece
over the rows it asks for (with the halo its window needs), recursively down the chain; a
member's rows go to the host only when something outside the chain reads them. How many pieces
and what each member computes in each come from lms/split/chain_size.py (`chain_pieces`,
`chain_spans`), which makes no op; runs of alike pieces are one loop (lms/split/looped.py).
"""

from dataclasses import dataclass

import tensorflow as tf

from lms import _tf_private
from lms.graph.names import REWRITTEN_MARK
from lms.split.chain_size import ChainMember, chain_pieces, chain_spans, span
from lms.split.layouts import layout
from lms.split.looped import Carried, looped_bounds, make_pieces, read, store
from lms.split.pieces import PieceCopies
from lms.split.rewrite import (
    Split,
    op_bytes,
    piece_scope,
    piece_shape,
    split_op,
    value_readers,
)


@dataclass
class _Member:
    """One op of a chain as its pieces are made."""

    op: object
    layout: object
    link: int | None  # the input read from the previous member's pieces (None: the first)
    kept: dict  # input position -> its host copy, for the inputs read from the host
    readers: list  # (reader, position) outside the chain: its output is stored if any
    stored: object = None  # what its last store returned (PieceCopies.store_piece)
    owned: int = 0  # rows stored so far
    total: object = None  # a "sum" member's running sum (the chain's last only)


def split_chain(chain: list, io: PieceCopies) -> list[Split]:
    """Replace the ops of `chain` ((op, pieces, why) each, from `chains`) by the chain's pieces
    (module docstring), along the last op's rows: at least as many as any of its ops was given,
    and enough that none computes a larger piece than the largest piece of one op alone
    (lms/split/chain_size.py; else the chain is cut in two). One op alone is `split_op`'s."""
    if len(chain) == 1:
        op, pieces, why = chain[0]
        if isinstance(layout(op), str):  # a fused batch norm's gradient, split with its forward
            return []
        return [split_op(op, pieces, io, why)]
    ops = [op for op, *_ in chain]
    members = []
    for k, op in enumerate(ops):
        link = None if k == 0 else input_position(op, ops[k - 1].outputs[0])
        readers = _outside_readers(op, ops[k + 1] if k + 1 < len(ops) else None)
        members.append(_Member(op, layout(op), link, {}, readers))
    sizing = [
        ChainMember(m.layout, m.link, bool(m.readers), op_bytes(m.op), pieces)
        for m, (_, pieces, _) in zip(members, chain, strict=True)
    ]
    count, cut = chain_pieces(sizing)
    if cut is not None:  # a halo wider than a piece alone: two chains (chain_size.py)
        return split_chain(chain[: cut + 1], io) + split_chain(chain[cut + 1 :], io)
    graph = ops[0].graph
    setattr(graph, REWRITTEN_MARK, True)  # the next plan of this step traces it afresh
    driver = members[-1].layout
    loops = io.loops

    spans = {}  # per cut tried (its first piece's bounds): each member's spans

    def calls_of(bounds):
        spans[bounds[0]] = chain_spans(sizing, bounds)
        return [_chain_calls(members, piece, bounds[p]) for p, piece in enumerate(spans[bounds[0]])]

    bounds, calls = looped_bounds(driver.length, count, calls_of, loops)
    spans = spans.get(bounds[0]) or chain_spans(sizing, bounds)
    with (
        graph.as_default(),
        tf.control_dependencies(None),
        tf.name_scope(piece_scope(ops[-1].name)),
    ):
        for member in members:
            for i in member.layout.kept:
                if i != member.link:
                    member.kept[i] = io.keep(member.op.inputs[i], len(bounds))
        run = _ChainRun([h.op for m in members for h in m.kept.values()], members, spans, io)

        def make(p, looped):
            start, stop = bounds[p]
            last = members[-1]
            with tf.control_dependencies(run.previous):
                piece = _rows(
                    members, len(members) - 1, start, stop, p + 1 == len(bounds), io, looped
                )
            if driver.combine == "sum":
                last.total = piece if last.total is None else last.total + piece
            else:
                shape = last.op.outputs[0].shape.as_list()
                key, at = ("store", len(members) - 1), start * driver.store_rows
                last.stored = store(io, looped, key, last.stored, piece, driver.axis, at, shape)
            run.previous = [t.op for t in run.get()]

        make_pieces(len(bounds), make, calls, run, loops)
        last = members[-1]
        ending = io.token(last.stored).op if driver.combine == "assemble" else last.total.op
        for member in members:
            _finish(member, io, last=member is members[-1])
    for member in members:
        _tf_private.move_control_outputs(member.op, getattr(ending, "op", ending))
    names = [m.op.name for m in members]
    splits = []
    for k, ((op, _, why), member) in enumerate(zip(chain, members, strict=True)):
        after = names[k - 1] if k else ""
        axis = member.layout.axis
        splits.append(Split(op.name, op.type, len(bounds), axis, op_bytes(op), why, after))
    return splits


class _ChainRun(Carried):
    """A chain's pieces as they are made (lms/split/looped.py): what a loop carries, each
    stored output's last store (and the last member's running sum)."""

    def __init__(self, previous: list, members: list, spans: list, io: PieceCopies):
        self.previous, self.members, self.spans, self.io = previous, members, spans, io

    def _stores(self) -> list:
        last = self.members[-1]
        stored = [m.stored for m in self.members[:-1] if m.readers]
        return stored + ([] if last.layout.combine == "sum" else [last.stored])

    def get(self) -> list:
        last = self.members[-1]
        tokens = [self.io.token(stored) for stored in self._stores()]
        return tokens + ([last.total] if last.layout.combine == "sum" else [])

    def set(self, tensors: list) -> None:
        stores = self._stores()
        for stored, tensor in zip(stores, tensors[: len(stores)], strict=True):
            self.io.resume(stored, tensor)
        if self.members[-1].layout.combine == "sum":
            self.members[-1].total = tensors[-1]
        self.previous = [t.op for t in tensors]

    def ready(self) -> bool:
        last = self.members[-1]
        made = last.total is not None if last.layout.combine == "sum" else True
        return made and all(stored is not None for stored in self._stores())

    def after(self, p: int) -> None:
        """Each member's rows stored as after piece p."""
        for k, member in enumerate(self.members):
            for piece in self.spans[: p + 1]:
                if piece[k].own_lo < piece[k].own_hi:
                    member.owned = piece[k].own_hi


def _chain_calls(members: list, spans: list, bounds: tuple) -> dict:
    """A chain's piece's reads, stores and cuts, {key: (start, length)}: its `spans`
    (lms/split/chain_size.py) as `_rows` makes them (lms/split/looped.py)."""
    calls, last = {}, len(members) - 1
    for k, (member, piece) in enumerate(zip(members, spans, strict=True)):
        lo, hi = piece.lo, piece.hi
        calls[("rows", k)] = (lo, hi - lo)
        calls[("form", k)] = (0, member.layout.form(lo, hi) if lo < hi else "empty")
        for i, (a, b) in piece.reads.items():
            if i != member.link:
                calls[("read", k, i)] = (a, b - a)
        if k < last:
            calls[("cut", k)] = (piece.start - lo, piece.stop - piece.start)
            if member.readers:
                calls[("store", k)] = (piece.own_lo, piece.own_hi - piece.own_lo)
                calls[("owned", k)] = (0, piece.own_lo - lo)
    if members[-1].layout.combine != "sum":
        rows, (start, stop) = members[-1].layout.store_rows, bounds
        calls[("store", last)] = (start * rows, (stop - start) * rows)
    return calls


def _outside_readers(op, after) -> list:
    """(reader, position) of `op`'s output outside its chain (`after`: the member after it)."""
    return [(c, i) for c, i in value_readers(op.outputs[0]) if c is not after]


def input_position(op, tensor) -> int:
    """Which input of `op` `tensor` is (its first)."""
    return next(i for i, x in enumerate(op.inputs) if x is tensor)


def _finish(member: _Member, io: PieceCopies, last: bool) -> None:
    """`member`'s readers outside the chain read its combined output; `io` told it is
    replaced."""
    op = member.op
    if last and member.layout.combine == "sum":
        whole = member.total
    elif member.stored is not None:
        whole = io.assemble(member.stored, op.outputs[0], member.layout.axis)
    else:  # nothing outside the chain reads it: it never leaves the device
        whole = op.outputs[0]
    for reader, position in member.readers:
        _tf_private.update_input(reader, position, whole)
    io.replaced(op, whole)


def _rows(members, k: int, start: int, stop: int, last_piece: bool, io: PieceCopies, looped=None):
    """Rows [start, stop) of member k's output on the device, for the chain's piece being made:
    member k's piece over those rows (and over the rows it owns, stored on the host when
    something outside the chain reads them), its chained input read from member k - 1's."""
    member = members[k]
    axis = member.layout.axis
    stores = bool(member.readers) and k + 1 < len(members)
    # the rows asked and those it owns (lms/split/chain_size.py, which sizes the chain by it)
    lo, hi, own_lo, own_hi = span(member.layout, member.owned, start, stop, last_piece, stores)

    def read_rows(i, a, b):
        if i == member.link:
            return _rows(members, k - 1, a, b, last_piece, io, looped)
        read_axis = axis if member.layout.read_axis is None else member.layout.read_axis
        kept, like = member.kept[i], member.op.inputs[i]
        return read(io, looped, ("read", k, i), kept, like, read_axis, a, b)

    if lo >= hi:  # no rows: each input read emptily (each host copy is read once per piece)
        with tf.control_dependencies([read_rows(i, 0, 0) for i in member.layout.kept]):
            shape = member.op.outputs[0].shape.as_list()
            shape[axis] = 0
            return tf.zeros(shape, member.op.outputs[0].dtype)
    rows = member.layout.piece(member.op, lo, hi, read_rows)
    rows.set_shape(piece_shape(member.layout, member.op.outputs[0], lo, hi))
    if k + 1 == len(members):
        return rows
    if stores and own_lo < own_hi:
        owned = _cut(rows, axis, own_lo - lo, own_hi - lo)
        shape = member.op.outputs[0].shape.as_list()
        key = ("store", k)
        member.stored = store(io, looped, key, member.stored, owned, axis, own_lo, shape)
        member.owned = own_hi
    return _cut(rows, axis, start - lo, max(stop, start) - lo)


def _cut(rows, axis: int, begin: int, end: int):
    """Rows [begin, end) of `rows` along `axis` (`rows` itself when that is all of it)."""
    if begin == 0 and end == rows.shape[axis]:
        return rows
    index = [slice(None)] * rows.shape.rank
    index[axis] = slice(begin, end)
    return rows[tuple(index)]
