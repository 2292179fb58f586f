"""How many pieces a chain of split ops runs in (lms/split/chain.py), worked out from the rows
each piece computes, without making any op.

A chain's piece p is its last op's piece p, whose reads of the op before it ask for the rows its
window covers: with halos, an op early in a chain computes more rows per piece than the op after
it (two 3x3x3 convolutions: 4 rows of the second read 6 of the first, which read 8 of its input).
The ops were given their pieces alone (lms/split/fit.py `pieces_for`: each piece at most a share
of the room), so a chain in as many pieces can hold more on the device than any op alone: the 3D
U-Net 144³'s chained plan simulated higher than its ops alone and was given up. Here a chain
takes enough pieces that no member's piece is larger than the largest piece of a member alone
(bytes per row of the op's inputs and outputs times the rows a piece computes), and where no
count of pieces does that (a halo wider than a piece alone), it is cut after the member over
the most, each part sized again.

`span` is the one rule for the rows a member computes in a piece, shared with the ops made
(chain.py `_rows`); `rows_per_piece` follows it through every piece with each layout's `reads`
(lms/split/pieces.py), which is tested to name the rows its pieces read.
"""

import math
from dataclasses import dataclass

from lms.split.looped import piece_bounds


@dataclass(frozen=True)
class ChainMember:
    """What sizing needs of a chain's op: its layout, the input read from the member before it
    (None: the first), whether its pieces hand on the rows they own (`stores`: something
    outside the chain reads its output, or a side op sums over it: chain.py), its inputs' and
    outputs' bytes and the pieces it was given (or a side op of it, if more)."""

    layout: object
    link: int | None
    stores: bool
    bytes: int
    pieces: int

    def piece_bytes(self, rows: int) -> float:
        """The member's bytes for a piece of `rows` rows (of `layout.length`)."""
        return self.bytes * rows / self.layout.length


def span(layout, owned: int, start: int, stop: int, last_piece: bool, stores: bool) -> tuple:
    """(lo, hi, own_lo, own_hi): the rows [lo, hi) a member computes when the chain's next op
    asks it for rows [start, stop), and the rows [own_lo, own_hi) it stores (nothing when
    `stores` is False: own_lo == own_hi): the next ones not stored yet (`owned` stored so
    far), to its end on the last piece."""
    if not stores:
        return start, stop, owned, owned
    own_lo, own_hi = owned, layout.length if last_piece else max(stop, owned)
    if start < stop:
        return min(start, own_lo), max(stop, own_hi), own_lo, own_hi
    return own_lo, own_hi, own_lo, own_hi


@dataclass(frozen=True)
class Span:
    """What a member does in one of the chain's pieces: the rows [lo, hi) it computes, the rows
    [own_lo, own_hi) it stores, the rows [start, stop) the member after it asked for, and the
    rows of each kept input it reads ({position: (lo, hi)})."""

    lo: int
    hi: int
    own_lo: int
    own_hi: int
    start: int
    stop: int
    reads: dict


def chain_spans(members: list, bounds: list) -> list[list[Span]]:
    """Per piece of `bounds` (cut along the last member's rows, as chain.py cuts them), each
    member's `Span`, in the order chain.py `_rows` makes them (the last member first)."""
    owned, found = [0] * len(members), []

    def visit(k: int, start: int, stop: int, last_piece: bool, spans: list) -> None:
        member = members[k]
        stores = member.stores and k + 1 < len(members)
        lo, hi, own_lo, own_hi = span(member.layout, owned[k], start, stop, last_piece, stores)
        # rows [lo, hi) or, with none, each input read emptily (chain.py `_rows`)
        reads = member.layout.reads(lo, hi) if lo < hi else {i: (0, 0) for i in member.layout.kept}
        spans.append(Span(lo, hi, own_lo, own_hi, start, stop, reads))
        if member.link is not None:
            visit(k - 1, *reads[member.link], last_piece, spans)
        if stores and own_lo < own_hi:
            owned[k] = own_hi

    for p, (start, stop) in enumerate(bounds):
        spans = []
        visit(len(members) - 1, start, stop, p + 1 == len(bounds), spans)
        found.append(spans[::-1])  # by member
    return found


def rows_per_piece(members: list, pieces: int) -> list[int]:
    """The most rows each member computes in one of the chain's `pieces` pieces (cut along
    the last member's rows, as chain.py cuts them)."""
    spans = chain_spans(members, piece_bounds(members[-1].layout.length, pieces))
    return [max(piece[k].hi - piece[k].lo for piece in spans) for k in range(len(members))]


def _excess(members: list, pieces: int, limit: float) -> list[float]:
    """Each member's piece bytes in a chain of `pieces` pieces over `limit`."""
    rows = rows_per_piece(members, pieces)
    return [m.piece_bytes(r) / limit for m, r in zip(members, rows, strict=True)]


def chain_pieces(members: list) -> tuple[int, int | None]:
    """(pieces, None): the fewest pieces, at least as many as any member was given, in which
    no member's piece is larger than the largest of the members' pieces alone; or (0, k) when
    no count up to one row of the last member per piece does that: cut the chain after member k
    (the one over the most)."""
    limit = max(m.piece_bytes(math.ceil(m.layout.length / m.pieces)) for m in members)
    length = members[-1].layout.length
    pieces = min(max(m.pieces for m in members), length)
    while True:
        excess = _excess(members, pieces, limit)
        if max(excess) <= 1:
            return pieces, None
        if pieces >= length:
            return 0, max(range(len(members) - 1), key=lambda k: excess[k])
        pieces = min(length, max(pieces + 1, math.ceil(pieces * 1.25)))
