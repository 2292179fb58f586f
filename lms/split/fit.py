"""When and what `LMS` splits (lms/split/rewrite.py does the splitting): ops named by the `split`
option always; with "auto" (the default), only while no plan fits by swapping alone, in rounds.

Round r splits every op whose own device bytes (`lms.memory.lifetimes.footprints`) exceed a share of
the room the budget leaves beside the resident bytes: first the ops larger than the room (no
swap plan can fit while they are whole: the floor), then those above 3/4, 1/2, 1/3, 1/4 and 1/6
of it (what still crowds the closest plan's peak beside the op running there). Each op gets
enough pieces for one piece to take at most an eighth of the room
(lms.split.rewrite.PIECE_SHARE); one tuning per round, not per op. Splitting stops at the first
plan that fits, after the last round, when the floor is an op that cannot be split, or before a
round that would take the plan past its cap of pieces (`pieces_cap`). Splitting is the lever
after every swapping parameter: a plan that fits by swapping never pays for pieces (their extra
host copies and smaller kernels).

The rounds are first decided on a model of the split ops (lms/split/modelled.py, nothing made:
`split_modelled`), each round's ops with the only readers they will be made with; the ops of
the first round whose modelled plan fits the budget (or of a later one, while its splits save
more swap traffic than they add: lms/split/worth.py `splits_pay`) are made once, in chains, and
tuned. Only when that plan misses the budget do rounds go on as above, made one by one, from it
(`split_in_rounds`). A step whose largest op alone is over the room starts splitting without
tuning swaps (`past_swapping`)."""

import logging
import time

from lms.errors import NothingFitsError
from lms.graph.names import RECOMPUTE_SCOPE, SPLITS_MADE
from lms.graph.step import heap_frozen
from lms.memory.lifetimes import footprints, largest_footprint
from lms.split.chain import only_readers, split_decided
from lms.split.layouts import layout, splittable
from lms.split.modelled import held_as_chained, modelled, reported_as_modelled
from lms.split.pieces import PieceCopies
from lms.split.rewrite import SCOPE, Split, piece_scope, pieces_for, running_ops, split_op
from lms.split.worth import splits_pay, swap_traffic, unsplittable_floor
from lms.values.budget import format_size

log = logging.getLogger("lms")
# shares of the room above which an op is split, round by round (the last two: Eigen's CPU
# kernels, whose convolution gradients' temporaries crowd ResNet50 1024² b1 after four rounds)
ROUNDS = (1.0, 0.75, 0.5, 1 / 3, 1 / 4, 1 / 6)
# the most pieces one plan may have where every piece is made as ops of its own (a GPU's piece
# copies, lms/split/pieces.py `PieceCopies.loops` False): each adds about ten ops to the graph
# (reads, halo, store) and its analysis and tuning time. GoogLeNet 4096² b1 in 400 MiB fit with
# 7,565 (81 s, 2.3 GiB of planning process), ResNet50 2048² b1 with 8,271 (39 s, 1.9 GiB);
# ResNet50 4096² b1, whose input alone leaves a sixth of the room, had passed 13 GiB before its
# first round was built.
MAX_PIECES = 16384
# the same where alike pieces run as one loop (the emulated device's copies, lms/split/looped.py):
# the graph grows by an op's border pieces and one loop body, not by its pieces, but deciding
# each piece's rows and loops still takes about 0.4 ms a piece (GoogLeNet 5120² b1 in 400 MiB:
# 165,518 pieces, 155 s of planning for a plan that did not fit; ResNet50 2688² b1, 33,285
# pieces, 20 s and fits, where MAX_PIECES stopped it before its first round).
MAX_LOOPED_PIECES = 65536


def pieces_cap(io: PieceCopies) -> int:
    """The most pieces a plan may have with `io`'s piece copies: MAX_LOOPED_PIECES where alike
    pieces run as one loop, else MAX_PIECES."""
    return MAX_LOOPED_PIECES if io.loops else MAX_PIECES


def _cap_name(io: PieceCopies) -> str:
    return "MAX_LOOPED_PIECES" if io.loops else "MAX_PIECES"


def forced_splits(graph, wanted: dict, io: PieceCopies, chained: bool = True) -> list[Split]:
    """Split every op whose type or name `wanted` lists, into that many pieces (in chains where
    consecutive ones can run piece by piece: lms/split/chain.py, when `chained`)."""
    decided, running = [], running_ops(graph)
    for op in list(graph.get_operations()):
        pieces = wanted.get(op.name, wanted.get(op.type))
        if pieces is None:
            continue
        reason = splittable(op) if op in running else "TensorFlow prunes it: it never runs"
        if reason:
            log.info("not splitting %s as asked: %s", op.name, reason)
            continue
        decided.append((op.name, pieces, "asked for (split option)"))
    return split_decided(graph, decided, io, chained)


def _closest_swaps(analysis, tune):
    """The closest swap plan of `analysis` (`tune(analysis)`, which cannot fit), or None."""
    try:
        return tune(analysis)
    except NothingFitsError as error:
        return error.closest


def _closest_peak(error: NothingFitsError) -> float:
    return error.closest.simulation.peak_bytes if error.closest is not None else float("inf")


def _targets(graph, analysis, share: float, room: int) -> list:
    """The unsplit ops above `share` of `room` bytes that can be split, largest first: (op, its
    bytes, the pieces it gets: `pieces_for`)."""
    threshold = share * room
    found = []
    for footprint in sorted(footprints(analysis), key=lambda f: f.bytes, reverse=True):
        if footprint.bytes <= threshold:
            break
        if footprint.name.startswith(f"{SCOPE}/"):  # a piece: already split
            continue
        # a gradient's recomputed pool (lms/graph/pool_reads.py): the gradient reads all it
        # reads and more, so it is split in the same round or before, and its pieces pool
        # their own rows; the recompute then never runs (split, its input's host copy was
        # kept for pieces that never read it: GoogLeNet 1024², 64 MiB a step)
        if footprint.name.startswith(f"{RECOMPUTE_SCOPE}/"):
            continue
        op = graph.get_operation_by_name(footprint.name)
        if splittable(op) is None:
            pieces = pieces_for(footprint.bytes, room, layout(op).length)
            found.append((op, footprint.bytes, pieces))
    return found


def _piece_floor(analysis, splits, room: int, reason: str = "") -> str | None:
    """When the plan's floor is a piece of a split op: which op, and its pieces' bytes against
    the room (what sets the limit then is the memory of one piece: more pieces are not made
    past one row per piece, and a window op's halo rows come with each)."""
    floor = largest_footprint(analysis)
    if not floor.name.startswith(f"{SCOPE}/"):
        return None
    split = next((s for s in splits if floor.name.startswith(f"{piece_scope(s.op)}/")), None)
    if split is None:
        return None
    share = floor.bytes / max(split.bytes / split.pieces, 1)  # > 1: halo rows, temporaries
    return (
        f"the floor is a piece of {split.op}, split into {split.pieces} pieces: "
        f"{format_size(floor.bytes)} of the {format_size(room)} of room beside the resident "
        f"bytes, {share:.1f}x its share of the op's inputs and outputs (the halo's rows and "
        "the kernel's temporary)" + (f"; {reason}" if reason else "")
    )


def _analysed_and_tuned(analyse, tune) -> tuple:
    """The edited graph analysed (`analyse()`) and tuned (`tune(analysis)`): (analysis, the
    tuned plan or the tuner's closest, its NothingFitsError or None, the plan's peak)."""
    analysis, failure = analyse(), None
    try:
        tuned = tune(analysis)
    except NothingFitsError as error:
        tuned, failure = error.closest, error
    peak = tuned.simulation.peak_bytes if tuned is not None else float("inf")
    return analysis, tuned, failure, peak


def _why(bytes_: int, share: float, room: int, budget: int, analysis) -> str:
    """Why a round splits an op of `bytes_`."""
    resident = format_size(analysis.resident_bytes)
    return (
        f"its {format_size(bytes_)} are over {share:.2g} of the {format_size(room)} the budget "
        f"of {format_size(budget)} leaves beside the resident {resident}"
    )


def split_to_fit(
    graph, analysis, budget: int, error: NothingFitsError, io: PieceCopies, analyse, tune, made=()
):
    """Split in rounds (module docstring) and tune again until a plan fits: (analysis, tuned,
    splits). `analyse()` reads the edited graph again; `tune(analysis)` tunes or raises
    NothingFitsError. Raises the last NothingFitsError, saying why splitting stopped, when none
    fits; it carries the `analysis` of the graph as split and the `splits`, for the closest
    plan. `made`: the splits the graph has already (split_in_rounds'), counted with its own."""
    splits, previous, closest, capped = list(made), _closest_peak(error), None, False
    why = f"after splitting {{}} ops, no op left above {ROUNDS[-1]:.2g} of the room"
    for share in ROUNDS:
        room = budget - analysis.resident_bytes
        if room <= 0:
            why = (
                f"splitting cannot help: the resident {format_size(analysis.resident_bytes)} "
                f"alone fill the budget of {format_size(budget)}"
            )
            raise error.stopped(why, analysis, splits)
        floor = largest_footprint(analysis)
        floor_op = graph.get_operation_by_name(floor.name)
        reason = splittable(floor_op)
        if floor.bytes > room and reason:
            why = _piece_floor(analysis, splits, room, reason)
            why = why or f"splitting cannot lower the floor: {floor.name}: {reason}"
            raise error.stopped(why, analysis, splits)
        targets = _targets(graph, analysis, share, room)
        if not targets:
            continue
        planned = sum(split.pieces for split in splits) + sum(n for *_, n in targets)
        if planned > pieces_cap(io):  # checked before the graph grows by them
            why = (
                f"{{}} ops split; the next round would make {planned:,} pieces, over the "
                f"{pieces_cap(io):,} a plan may have (lms.split.fit.{_cap_name(io)})"
            )
            capped = True
            break
        for op, bytes_, pieces in targets:
            reason = _why(bytes_, share, room, budget, analysis)
            split = split_op(op, pieces, io, reason)
            splits.append(split)
            log.info(
                "split %s (%s) into %d pieces along axis %d: %s",
                op.name,
                op.type,
                split.pieces,
                split.axis,
                reason,
            )
        analysis = analyse()
        closest = None
        try:
            tuned = tune(analysis)
        except NothingFitsError as again:
            error, peak = again, _closest_peak(again)
        else:
            if tuned.simulation.peak_bytes <= budget:
                return analysis, tuned, splits
            # its bytes asked fit, not with the allocator's padding: splitting goes on
            closest, peak = tuned, tuned.simulation.peak_bytes
        log.info(
            "after %d splits the closest plan's peak is %s (before: %s)",
            len(splits),
            format_size(peak),
            format_size(previous),
        )
        previous = peak
    why = (None if capped else _piece_floor(analysis, splits, room)) or why.format(len(splits))
    if closest is not None:  # the tuner keeps such a plan: the closed loop measures it
        log.info("Splitting stopped (%s): keeping the closest plan", why)
        return analysis, closest, splits
    raise error.stopped(why, analysis, splits)


def split_in_rounds(
    graph, analysis, budget: int, error, io: PieceCopies, analyse, tune, chained, made=True
):
    """`split_modelled`, then `split_to_fit` from the plan it made when that does not fit (or
    from the start when no round fits as modelled): (analysis, tuned, splits). When the model's
    plan fits, its ops are made as they run (in chains when `chained`) and the graph says so
    (SPLITS_MADE): else `chain_to_fit` chains them on a fresh trace. With `made` False (a plan
    only reported), a plan that fits as modelled may be reported so, nothing made: the model's
    analysis (`Analysis.modelled`), its tuned plan and the Splits that would be made."""
    with heap_frozen():  # the rounds' models are copies of the analysis: many objects
        found = split_modelled(graph, analysis, budget, io, analyse, tune, chained, made)
    if found is None:
        try:
            return split_to_fit(graph, analysis, budget, error, io, analyse, tune)
        except NothingFitsError as stopped:
            if stopped.closest is None and not stopped.splits:  # swaps were not tuned
                stopped.closest = _closest_swaps(analysis, tune)  # (`unless_past_swapping`)
            raise
    analysis, tuned, made, failure = found
    if failure is None and tuned.simulation.peak_bytes <= budget:
        setattr(graph, SPLITS_MADE, True)
        return analysis, tuned, made
    error = failure or NothingFitsError("only with the allocator's padding over", tuned)
    return split_to_fit(graph, analysis, budget, error, io, analyse, tune, made)


def split_modelled(
    graph, analysis, budget: int, io: PieceCopies, analyse, tune, chained: bool, made=True
):
    """The rounds of `split_to_fit` decided on `analysis` with the ops split so far modelled
    (lms/split/modelled.py), nothing made until a round's plan fits as modelled; then those ops
    (and their only readers, `only_readers`, when `chained`) split once, in chains when
    `chained`, analysed (`analyse()`) and tuned (`tune(analysis)`, which raises
    NothingFitsError) for real: (analysis, tuned, splits, the tuner's NothingFitsError or None).
    None, the graph untouched, when no round fits as modelled. With `made` False, where the
    model models the made pieces (lms/split/modelled.py `reported_as_modelled`), a round that
    fits as modelled is not made: (its model, its tuned plan, the Splits it would make, None)."""
    started, decided, total, current = time.perf_counter(), [], 0, analysis
    room = budget - analysis.resident_bytes
    if room <= 0:
        return None
    known = {}  # each split op's layout and largest piece, across the rounds (`modelled`)
    chosen = None  # (decided, readers, traffic, model, tuned) of the round that fits, once one does
    for share in ROUNDS:
        targets = _targets(graph, current, share, room)
        if not targets:
            continue
        total += sum(n for *_, n in targets)
        if total > pieces_cap(io):
            if chosen is not None:
                break
            return None
        for op, bytes_, pieces in targets:
            decided.append((op.name, pieces, _why(bytes_, share, room, budget, analysis)))
            log.info("to split %s (%s) into %d pieces: %s", op.name, op.type, *decided[-1][1:])
        # modelled as they would be made: with their only readers (lms/split/chain.py)
        readers = only_readers(graph, decided) if chained else []
        current = modelled(analysis, [(n, pieces) for n, pieces, *_ in decided + readers], known)
        try:
            tuned = tune(current)
        except NothingFitsError as error:
            tuned = error.closest
        peak = tuned.simulation.peak_bytes if tuned is not None else float("inf")
        log.info(
            "Splitting as modelled, %d ops above %.2g of the room: closest plan %s",
            *(len(decided), share, format_size(peak)),
        )
        # (the model has come within 0-3 % of the made plans, 400 MiB: GoogLeNet 4096² b1 354
        # MiB modelled, 350 made; ResNet50 1856² 333 and 329; the 3D U-Net 128³ 347 and 347.
        # Over the budget by less, once made, did not fit: GoogLeNet's first round 372 and 372)
        if peak <= budget:
            traffic = swap_traffic(current, tuned)
            if chosen is not None and not splits_pay(graph, chosen, decided + readers, traffic):
                break
            chosen = (list(decided), list(readers), traffic, current, tuned)
            continue
        if chosen is not None:
            break
        stuck = unsplittable_floor(graph, current, room)
        if stuck is not None:  # made once: the rounds after stop at it (`split_to_fit`)
            log.info("Splitting as modelled stops: its floor %s cannot be split", stuck)
            chosen = (decided, readers, None, current, None)
            break
    if chosen is None:
        took = time.perf_counter() - started
        log.info("No splitting round fits as modelled (%.1f s): splitting round by round", took)
        return None
    decided, readers, _, model, tuned = chosen
    decided += readers
    if not made and tuned is not None and reported_as_modelled(io, analysis, decided, known):
        splits = split_decided(graph, decided, io, chained, made=False)
        model, tuned = held_as_chained(model, splits, tuned)
        log.info(
            "Split %d ops as the rounds decided on the model, not made (a plan only reported): "
            "simulated peak %s (%.1f s)",
            *(len(splits), format_size(tuned.simulation.peak_bytes), time.perf_counter() - started),
        )
        return model, tuned, splits, None
    splits = split_decided(graph, decided, io, chained)
    analysis, tuned, failure, peak = _analysed_and_tuned(analyse, tune)
    log.info(
        "Split %d ops as the rounds decided on the model: simulated peak %s (%.1f s)",
        *(len(splits), format_size(peak), time.perf_counter() - started),
    )
    return analysis, tuned, splits, failure


def chain_to_fit(
    graph, made: list, io: PieceCopies, analyse, tune, budget: int, unchained, sides=True
):
    """The ops `made` (Splits, decided in rounds, each op alone) split again in `graph` (a fresh
    trace of the step) in chains (lms/split/chain.py; with side ops when `sides`), analysed
    (`analyse()`) and tuned (`tune(analysis)`, raising NothingFitsError) once: (analysis,
    tuned, splits, the tuner's NothingFitsError or None) when that plan fits `budget` or comes
    closer than `unchained` (the plan of the ops alone: also the closest, when nothing fit);
    else None, or "sides" when that plan had side ops: chained again without them, it may come
    closer (with Eigen's kernels a filter gradient's temporary does not shrink with its piece,
    and beside a chain's rows it came out higher than alone).
    Rounds split one op at a time, so a chain is made once, when the splits are known."""
    started = time.perf_counter()
    decided = [(s.op, s.pieces, s.why) for s in made]
    splits = split_decided(graph, decided + only_readers(graph, decided, sides), io, sides=sides)
    linked = sum(1 for split in splits if split.chained_after)
    if not linked:
        return None
    analysis, tuned, failure, peak = _analysed_and_tuned(analyse, tune)
    alone, took = unchained.simulation.peak_bytes, time.perf_counter() - started
    if peak > max(budget, alone):
        with_sides = any(split.side for split in splits)
        log.info(
            "Chained %d of %d split ops: simulated peak %s, over the budget of %s; each op stays "
            "split alone%s (%.1f s)",
            *(linked, len(splits), format_size(peak), format_size(budget)),
            ", or is chained again without side ops" if with_sides else "",
            took,
        )
        return "sides" if with_sides else None
    tuned.baseline = unchained.baseline  # "without LMS" stays the step as traced
    log.info(
        "Chained %d of %d split ops (their pieces pass on the device): simulated peak %s (each "
        "alone: %s; %.1f s)",
        *(linked, len(splits), format_size(peak), format_size(alone), took),
    )
    return analysis, tuned, splits, failure
