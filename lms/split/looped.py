"""A split op's (or a chain's) pieces that are alike run as one While loop, so that the step's
graph grows by a piece's ops and not by every piece's (issue 44: GoogLeNet 4096² in 400 MiB made
106k ops for 7.5k pieces, built twice, and planning took 80x the trace).

Pieces are alike when they differ only by where they read and write: the same rows read from
each kept input and computed, each read and store moved by the same number of rows from the
piece before, the same cuts. Border pieces (a window's padding, the last piece's remainder, a
chain member storing the rest of its rows) differ and are made one by one as before. The run of
alike pieces [a, b] becomes one loop whose body is piece a made by the same code as every piece
(lms/split/rewrite.py `split_op`, lms/split/chain_run.py `split_chain`), except that its host
reads and stores take the body's piece index and look their rows up in a table (`read`,
`store`: `PieceCopies.read_rows`, `store_rows`). That the layouts' pieces are alike wherever
their reads and cuts are (translation invariance) is tested for every op of 2D and 3D Keras
steps (tests/lms/split/test_looped.py).

What a loop carries from piece to piece: each host array's last store (its handle: the next
store follows it) and a reduction's running sum. The loop runs one piece at a time
(`parallel_iterations=1`: an iteration starts once the one before is done). The analysis
sees the loop as it sees any While (lms/tuning/analysis.py): one op holding its body's peak,
one piece's, for as long as it runs. Only piece copies that say so loop (`PieceCopies.loops`:
the emulated device's host store); the others make every piece (a GPU's copies: TensorFlow's
own, whose placement inside a loop body is not planned here).
"""

import math
from dataclasses import dataclass

import tensorflow as tf

# the fewest alike pieces worth a loop (a loop adds about a dozen ops of its own)
MIN_LOOP = 3
# how many fewer rows per piece `looped_bounds` tries (a stride's multiple is within it)
SEARCH = 8


def piece_bounds(length: int, pieces: int, rows: int | None = None) -> list[tuple[int, int]]:
    """[start, stop) of each piece of [0, length): `pieces` of them (at least 2, at most
    `length`), all of the same rows but the last, which has what is left (alike pieces loop);
    or as many as pieces of `rows` rows take."""
    rows = rows or math.ceil(length / max(2, min(pieces, length)))
    return [(start, min(start + rows, length)) for start in range(0, length, rows)]


def looped_bounds(length: int, pieces: int, calls_of, loops: bool) -> tuple[list, list]:
    """The bounds of at least `pieces` pieces of [0, length) (`piece_bounds`) and their calls
    (`calls_of(bounds)`: per piece, {key: (start, length)}). When `loops`: of the rows per
    piece from `pieces`' down to SEARCH fewer, the most that leave the fewest pieces out of
    alike runs. A strided op's input gradient reads alike only when its pieces' rows are a
    multiple of the stride (GoogLeNet 2048²: max pool gradients in pieces of 49 rows read 51
    and 53 rows in turn, and none looped)."""
    rows = math.ceil(length / max(2, min(pieces, length)))
    if not loops:
        return piece_bounds(length, pieces), None
    best = None
    for fewer in range(rows, max(0, rows - SEARCH), -1):
        bounds = piece_bounds(length, pieces, fewer)
        if len(bounds) < 2:
            continue
        calls = calls_of(bounds)
        alone = len(bounds) - sum(b - a + 1 for a, b in alike_runs(calls))
        if best is None or alone < best[0]:
            best = (alone, bounds, calls)
        if alone <= 2:  # the first piece and the last: as good as it gets
            break
    return best[1], best[2]


@dataclass(frozen=True)
class Looped:
    """A loop body being made for pieces `first` to `first + len(table) - 1`: each read's and
    store's starts per piece (`tables`, by the caller's key), and the body's position in them
    (`position`: an int64 scalar tensor, 0 for piece `first`)."""

    first: int
    tables: dict  # key -> (starts per piece, length)
    position: object

    def starts(self, key, start: int, length: int) -> tuple:
        """The starts of call `key` for every piece of the loop; `start` and `length` are
        what piece `first` asks (checked: the body is piece `first`)."""
        starts, known = self.tables[key]
        if starts[0] != start or known != length:
            raise AssertionError(
                f"a looped piece asked {key} rows {start}+{length}, its table {starts[0]}+{known}"
            )
        return starts


def alike_runs(calls: list, minimum: int = MIN_LOOP) -> list[tuple[int, int]]:
    """The runs [a, b] of consecutive pieces (never piece 0, which makes the host arrays) whose
    calls (per piece: {key: (start, length)}) have the same keys and lengths and move by the
    same rows from one piece to the next, at least `minimum` long."""

    orders = {}  # a piece's keys as made -> in a set order (alike pieces make them alike)

    def order(keys) -> tuple:
        made = tuple(keys)
        if made not in orders:
            orders[made] = tuple(sorted(made, key=repr))
        return orders[made]

    def lengths(p: int) -> tuple:
        found = calls[p]
        return tuple((k, found[k][1]) for k in order(found))

    def moves(p: int):  # from piece p to p + 1
        before, now = calls[p], calls[p + 1]
        if before.keys() != now.keys():
            return None
        return tuple((k, now[k][0] - before[k][0]) for k in order(now))

    runs, a = [], 1
    while a < len(calls):
        b, shape, step = a, lengths(a), None
        while b + 1 < len(calls) and lengths(b + 1) == shape:
            move = moves(b)
            if move is None or (step is not None and move != step):
                break
            b, step = b + 1, move
        if b - a + 1 >= minimum:
            runs.append((a, b))
        a = b + 1
    return runs


def read(io, looped, key, kept, like, axis: int, lo: int, hi: int):
    """Rows [lo, hi) of the kept `like` on the device (`PieceCopies.read`); in a loop's body
    (`looped`), the rows call `key` reads in the body's piece (`read_rows`)."""
    if looped is None:
        return io.read(kept, like, axis, lo, hi)
    starts = looped.starts(key, lo, hi - lo)
    return io.read_rows(kept, like, axis, starts, hi - lo, looped.position)


def store(io, looped, key, stored, piece, axis: int, start: int, shape: list):
    """`piece` stored at `start` along `axis` (`PieceCopies.store_piece`); in a loop's body, at
    the start call `key` has in the body's piece (`store_rows`). Returns the new `stored`."""
    if looped is None:
        return io.store_piece(stored, piece, axis, start, shape)
    starts = looped.starts(key, start, piece.shape[axis])
    return io.store_rows(stored, piece, axis, starts, shape, looped.position)


def tables(calls: list, a: int, b: int) -> dict:
    """Each call's starts over pieces [a, b], and its length."""
    return {
        key: (tuple(calls[p][key][0] for p in range(a, b + 1)), calls[a][key][1])
        for key in calls[a]
    }


class Carried:
    """What a loop carries from piece to piece, as the caller keeps it: `get()` the tensors,
    `set(tensors)` them (the body's inputs, then the loop's outputs), `ready()` whether every
    one exists yet (a host array is made by its first store), `after(p)` any state kept in
    Python set as after piece p. `previous`: what the next piece waits for (the kept inputs
    on the host for the first, then what the piece before left)."""

    previous: list

    def get(self) -> list: ...

    def set(self, tensors: list) -> None: ...

    def ready(self) -> bool: ...

    def after(self, p: int) -> None: ...


def make_pieces(count: int, make, calls: list, carried: Carried, loops: bool) -> None:
    """Make pieces 0 .. count - 1 by `make(p, looped)` (`looped` None: piece p as itself),
    each run of alike pieces (`alike_runs` of `calls`) as one loop when `loops`."""
    runs = dict(alike_runs(calls)) if loops and calls else {}
    p = 0
    while p < count:
        last = runs.get(p)
        if last is None or not carried.ready():
            make(p, None)
            p += 1
            continue
        _loop(p, last, make, tables(calls, p, last), carried)
        p = last + 1


def _loop(first: int, last: int, make, table: dict, carried: Carried) -> None:
    """Pieces [first, last] as one While loop whose body is piece `first` (`make`).

    The body's piece depends on the loop's index alone, never on what the loop carries: one
    piece runs at a time because `parallel_iterations=1` starts an iteration only once the one
    before is done. A piece that waited for the carried stores would close a cycle through
    the lowered loop's back edges, and oneDNN's graph rewrite, which visits the graph in a
    depth-first post order that does not skip back edges, then reached a max pool gradient
    before its pool in some bodies (which ones changed from process to process): those got
    TensorFlow's own kernel, without the pool's workspace (GoogLeNet 4096² in 400 MiB: 35-253
    of 783 pieces, 1.2-5.4 s of a 26-32 s step)."""

    def cond(index, *state):
        return index <= last

    def body(index, *state):
        carried.set(list(state))
        position = index - first
        carried.previous = [position.op]  # the piece waits for its index alone (docstring)
        make(first, Looped(first, table, position))
        out = carried.get()
        for tensor, before in zip(out, state, strict=True):
            tensor.set_shape(before.shape)  # (a filter gradient's shape is lost in a body)
        return (index + 1, *out)

    # lowered, each loop variable enters the loop on its own: the first piece's reads, which
    # wait for the index alone, must not start before what the pieces before left
    with tf.control_dependencies([*carried.previous, *carried.get()]):
        start = tf.constant(first, tf.int64)
    result = tf.while_loop(
        cond,
        body,
        (start, *carried.get()),
        parallel_iterations=1,
        maximum_iterations=last - first + 1,  # its trip count, for whoever reads the graph
        name="lms_pieces",
    )
    carried.set(list(result[1:]))
    carried.after(last)
