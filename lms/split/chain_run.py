"""A chain's pieces made (lms/split/chain.py decides the chains; docs/lms.md, "Splitting"):
piece p of the chain is its last op's piece p, whose read of the op before it is that op's piece
over the rows it asks for (with the halo its window needs), recursively down the chain; a
member's rows go to the host only when something outside the chain reads them, and a member's
side ops (chain.py) sum over the rows it owns in the same pieces. How many pieces
and what each member computes in each come from lms/split/chain_size.py (`chain_pieces`,
`chain_spans`), which makes no op; runs of alike pieces are one loop (lms/split/looped.py).
"""

from dataclasses import dataclass, field

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
    planned_split,
    split_op,
    value_readers,
)


@dataclass
class _Side:
    """A split op whose pieces sum over a member's rows in the chain's pieces (chain.py)."""

    op: object
    layout: object
    position: int  # its input read from the member's rows
    pieces: int  # the pieces it was given alone
    why: str
    kept: dict = field(default_factory=dict)  # its other inputs' host copies, by position
    total: object = None  # its running sum


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
    sides: list = field(default_factory=list)  # its side ops (`_Side`)

    @property
    def owns(self) -> bool:
        """Whether its pieces hand on the rows they own: stored for readers outside the chain,
        summed by its side ops."""
        return bool(self.readers or self.sides)


def split_chain(chain: list, io: PieceCopies, made: bool = True) -> list[Split]:
    """Replace the ops of `chain` ((op, pieces, why) each, from `chains`) by the chain's pieces
    (module docstring), along the last op's rows: at least as many as any of its ops was given,
    and enough that none computes a larger piece than the largest piece of one op alone
    (lms/split/chain_size.py; else the chain is cut in two). One op alone is `split_op`'s.
    Entries (op, pieces, why, (k, position)) after the members are side ops of member k.
    With `made` False nothing is made: the Splits it would make, their pieces counted as it
    counts them (a plan only reported: lms/split/fit.py `split_modelled`)."""
    entries = [entry for entry in chain if len(entry) == 3]
    side_entries = [entry for entry in chain if len(entry) == 4]
    if len(entries) == 1 and not side_entries:
        op, pieces, why = chain[0]
        if isinstance(layout(op), str):  # a fused batch norm's gradient, split with its forward
            return []
        return [(split_op if made else planned_split)(op, pieces, io, why)]
    ops = [op for op, *_ in entries]
    members = []
    for k, op in enumerate(ops):
        link = None if k == 0 else input_position(op, ops[k - 1].outputs[0])
        sides = [_Side(s, layout(s), p, n, why) for s, n, why, (j, p) in side_entries if j == k]
        readers = _outside_readers(op, ops[k + 1] if k + 1 < len(ops) else None)
        readers = [(r, i) for r, i in readers if r not in {side.op for side in sides}]
        members.append(_Member(op, layout(op), link, {}, readers, sides=sides))
    sizing = [
        ChainMember(
            m.layout, m.link, m.owns, op_bytes(m.op), max([n, *(s.pieces for s in m.sides)])
        )
        for m, (_, n, _) in zip(members, entries, strict=True)
    ]
    count, cut = chain_pieces(sizing)
    if cut is not None:  # a halo wider than a piece alone: two chains (chain_size.py)
        head = [e for e in side_entries if e[3][0] <= cut]
        tail = [(*e[:3], (e[3][0] - cut - 1, e[3][1])) for e in side_entries if e[3][0] > cut]
        first = split_chain(entries[: cut + 1] + head, io, made)
        return first + split_chain(entries[cut + 1 :] + tail, io, made)
    driver = members[-1].layout
    spans = {}  # per cut tried (its first piece's bounds): each member's spans

    def calls_of(bounds):
        spans[bounds[0]] = chain_spans(sizing, bounds)
        return [_chain_calls(members, piece, bounds[p]) for p, piece in enumerate(spans[bounds[0]])]

    bounds, calls = looped_bounds(driver.length, count, calls_of, io.loops)
    if made:
        spans = spans.get(bounds[0]) or chain_spans(sizing, bounds)
        _make_chain(members, spans, bounds, calls, io)
    names = [m.op.name for m in members]
    splits = []
    for k, ((op, _, why), member) in enumerate(zip(entries, members, strict=True)):
        after = names[k - 1] if k else ""
        axis = member.layout.axis
        splits.append(Split(op.name, op.type, len(bounds), axis, op_bytes(op), why, after))
        for side in member.sides:
            found = (side.op.name, side.op.type, len(bounds), side.layout.axis)
            splits.append(Split(*found, op_bytes(side.op), side.why, op.name, side=True))
    return splits


def _make_chain(members: list, spans: list, bounds: list, calls, io: PieceCopies) -> None:
    """The chain's pieces made in its graph (`split_chain`): its members' and side ops'
    inputs kept, the pieces (alike runs looped), each member's output put together for its
    readers outside the chain, and what waited for a member waiting for the chain's end."""
    ops = [m.op for m in members]
    graph = ops[0].graph
    setattr(graph, REWRITTEN_MARK, True)  # the next plan of this step traces it afresh
    driver = members[-1].layout
    loops = io.loops
    with (
        graph.as_default(),
        tf.control_dependencies(None),
        tf.name_scope(piece_scope(ops[-1].name)),
    ):
        for member in members:
            for i in member.layout.kept:
                if i != member.link:
                    member.kept[i] = io.keep(member.op.inputs[i], len(bounds))
            for side in member.sides:
                for i in side.layout.kept:
                    if i != side.position:
                        side.kept[i] = io.keep(side.op.inputs[i], len(bounds))
        kept = [h for m in members for h in [*m.kept.values(), *_side_handles(m)]]
        run = _ChainRun([h.op for h in kept], members, spans, io)

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
            for side in member.sides:
                _finish_side(side, io)
    for member in members:
        _tf_private.move_control_outputs(member.op, getattr(ending, "op", ending))
        for side in member.sides:
            _tf_private.move_control_outputs(side.op, side.total.op)


def _side_handles(member: _Member) -> list:
    """The host copies `member`'s side ops read."""
    return [h for side in member.sides for h in side.kept.values()]


class _ChainRun(Carried):
    """A chain's pieces as they are made (lms/split/looped.py): what a loop carries, each
    stored output's last store (and the last member's running sum)."""

    def __init__(self, previous: list, members: list, spans: list, io: PieceCopies):
        self.previous, self.members, self.spans, self.io = previous, members, spans, io

    def _stores(self) -> list:
        last = self.members[-1]
        stored = [m.stored for m in self.members[:-1] if m.readers]
        return stored + ([] if last.layout.combine == "sum" else [last.stored])

    def _sums(self) -> list:
        """What holds a running sum: the last member when its pieces are summed, side ops."""
        last = self.members[-1]
        holders = [last] if last.layout.combine == "sum" else []
        return holders + [side for member in self.members for side in member.sides]

    def get(self) -> list:
        tokens = [self.io.token(stored) for stored in self._stores()]
        return tokens + [holder.total for holder in self._sums()]

    def set(self, tensors: list) -> None:
        stores = self._stores()
        for stored, tensor in zip(stores, tensors[: len(stores)], strict=True):
            self.io.resume(stored, tensor)
        for holder, tensor in zip(self._sums(), tensors[len(stores) :], strict=True):
            holder.total = tensor
        self.previous = [t.op for t in tensors]

    def ready(self) -> bool:
        made = all(holder.total is not None for holder in self._sums())
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
            if member.owns:
                calls[("own", k)] = (piece.own_lo, piece.own_hi - piece.own_lo)
                calls[("owned", k)] = (0, piece.own_lo - lo)
            if member.readers:
                calls[("store", k)] = (piece.own_lo, piece.own_hi - piece.own_lo)
        own = (lo, hi) if k == last else (piece.own_lo, piece.own_hi)
        for j, side in enumerate(member.sides):
            form = side.layout.form(*own) if own[0] < own[1] else "empty"
            calls[("side form", k, j)] = (0, form)
            reads = side.layout.reads(*own) if own[0] < own[1] else {}
            for i in (i for i in side.layout.kept if i != side.position):
                a, b = reads.get(i, (0, 0))
                calls[("side", k, j, i)] = (a, b - a)
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


def _finish_side(side: _Side, io: PieceCopies) -> None:
    """`side`'s readers read its sum over the chain's pieces; `io` told it is replaced."""
    for reader, position in value_readers(side.op.outputs[0]):
        _tf_private.update_input(reader, position, side.total)
    io.replaced(side.op, side.total)


def _side_pieces(member: _Member, k: int, rows, lo: int, hi: int, io, looped) -> None:
    """Each of `member`'s side ops over its rows [lo, hi) (`rows`, on the device), added to its
    sum; with no rows, each of its host copies read emptily (each is read once per piece)."""
    for j, side in enumerate(member.sides):
        axis = side.layout.axis if side.layout.read_axis is None else side.layout.read_axis

        def read_rows(i, a, b, side=side, j=j, axis=axis):
            if i == side.position:  # exactly rows [lo, hi) of the member (chain.py side_position)
                return rows
            kept, like = side.kept[i], side.op.inputs[i]
            return read(io, looped, ("side", k, j, i), kept, like, axis, a, b)

        out = side.op.outputs[0]
        if lo < hi:
            part = _side_piece(side, lo, hi, read_rows, rows)
        else:
            with tf.control_dependencies([read_rows(i, 0, 0) for i in side.kept]):
                part = tf.zeros(out.shape, out.dtype)
        part.set_shape(out.shape)
        side.total = part if side.total is None else side.total + part


def _side_piece(side: _Side, lo: int, hi: int, read_rows, rows):
    """`side`'s piece over rows [lo, hi) (`rows`). A bias's gradient is made as the Sum it is
    (over every axis but the channels'), not as a BiasAddGrad: oneDNN's graph rewrite fuses a
    BiasAddGrad with a filter's gradient reading the same tensor into one op, which then waits
    for the inputs of both; with the filter gradient's input read placed after the bias
    gradient in the enforced op order (pieces made outside a loop), the step's graph had a
    cycle, and TensorFlow's own order ran instead (GoogLeNet 1024² in 150 MiB)."""
    op = side.op
    if op.type != "BiasAddGrad":
        return side.layout.piece(op, lo, hi, read_rows)
    channels = 1 if op.get_attr("data_format") == b"NCHW" else rows.shape.rank - 1
    axes = [a for a in range(rows.shape.rank) if a != channels]
    if rows.dtype in (tf.float16, tf.bfloat16):  # summed in float32, as the kernel does
        return tf.cast(tf.reduce_sum(tf.cast(rows, tf.float32), axes), rows.dtype)
    return tf.reduce_sum(rows, axes)


def _rows(members, k: int, start: int, stop: int, last_piece: bool, io: PieceCopies, looped=None):
    """Rows [start, stop) of member k's output on the device, for the chain's piece being made:
    member k's piece over those rows (and over the rows it owns, stored on the host when
    something outside the chain reads them), its chained input read from member k - 1's."""
    member = members[k]
    axis = member.layout.axis
    last = k + 1 == len(members)
    owns, stores = member.owns and not last, bool(member.readers) and not last
    # the rows asked and those it owns (lms/split/chain_size.py, which sizes the chain by it)
    lo, hi, own_lo, own_hi = span(member.layout, member.owned, start, stop, last_piece, owns)

    def read_rows(i, a, b):
        if i == member.link:
            return _rows(members, k - 1, a, b, last_piece, io, looped)
        read_axis = axis if member.layout.read_axis is None else member.layout.read_axis
        kept, like = member.kept[i], member.op.inputs[i]
        return read(io, looped, ("read", k, i), kept, like, read_axis, a, b)

    if lo >= hi:  # no rows: each input read emptily (each host copy is read once per piece)
        _side_pieces(member, k, None, 0, 0, io, looped)
        with tf.control_dependencies([read_rows(i, 0, 0) for i in member.layout.kept]):
            shape = member.op.outputs[0].shape.as_list()
            shape[axis] = 0
            return tf.zeros(shape, member.op.outputs[0].dtype)
    rows = member.layout.piece(member.op, lo, hi, read_rows)
    rows.set_shape(piece_shape(member.layout, member.op.outputs[0], lo, hi))
    if last:
        _side_pieces(member, k, rows, lo, hi, io, looped)
        return rows
    if owns and own_lo < own_hi:
        owned = _cut(rows, axis, own_lo - lo, own_hi - lo)
        if stores:
            shape = member.op.outputs[0].shape.as_list()
            key = ("store", k)
            member.stored = store(io, looped, key, member.stored, owned, axis, own_lo, shape)
        _side_pieces(member, k, owned, own_lo, own_hi, io, looped)
        member.owned = own_hi
    elif owns:
        _side_pieces(member, k, None, 0, 0, io, looped)
    return _cut(rows, axis, start - lo, max(stop, start) - lo)


def _cut(rows, axis: int, begin: int, end: int):
    """Rows [begin, end) of `rows` along `axis` (`rows` itself when that is all of it)."""
    if begin == 0 and end == rows.shape[axis]:
        return rows
    index = [slice(None)] * rows.shape.rank
    index[axis] = slice(begin, end)
    return rows[tuple(index)]
