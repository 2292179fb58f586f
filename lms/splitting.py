"""When and what `LMS` splits (lms/split.py does the splitting): ops named by the `split`
option always; with "auto" (not yet the default), the op that sets the floor, one at a time,
only while no plan fits without it. Splitting is the lever after every swapping parameter: a
plan that fits by swapping never pays for pieces (their extra host copies and smaller kernels)."""

import logging

from lms.budget import format_size
from lms.errors import NothingFitsError
from lms.lifetimes import largest_footprint
from lms.split import Split, layout, pieces_for, split_op, splittable

log = logging.getLogger("lms")
MAX_SPLITS = 32  # ops split for one step before giving up


def forced_splits(graph, wanted: dict, io) -> list[Split]:
    """Split every op whose type or name `wanted` lists, into that many pieces."""
    splits = []
    for op in list(graph.get_operations()):
        pieces = wanted.get(op.name, wanted.get(op.type))
        if pieces is None:
            continue
        reason = splittable(op)
        if reason:
            log.info("not splitting %s as asked: %s", op.name, reason)
            continue
        splits.append(split_op(op, pieces, io, "asked for (split option)"))
    return splits


def split_to_fit(graph, analysis, budget: int, error: NothingFitsError, io, analyse, tune):
    """Split the floor's op and tune again until a plan fits: (analysis, tuned, splits).
    `analyse()` reads the edited graph again; `tune(analysis)` tunes or raises NothingFitsError.
    Raises the last NothingFitsError, saying why splitting stopped, when none fits; it carries
    the `analysis` of the graph as split and the `splits`, for the closest plan."""
    splits = []
    for _ in range(MAX_SPLITS):
        floor = largest_footprint(analysis)
        op = graph.get_operation_by_name(floor.name)
        reason = splittable(op)
        if reason:
            error.args = (f"{error}; splitting cannot lower the floor: {op.name}: {reason}",)
            error.analysis, error.splits = analysis, splits
            raise error
        room = budget - analysis.resident_bytes
        pieces = pieces_for(floor.bytes, room, layout(op).length)
        why = (
            f"its {format_size(floor.bytes)} and the resident "
            f"{format_size(analysis.resident_bytes)} exceed what swapping can fit in "
            f"{format_size(budget)}"
        )
        split = split_op(op, pieces, io, why)
        splits.append(split)
        log.info(
            "split %s (%s, %s) into %d pieces along axis %d: %s",
            op.name,
            op.type,
            format_size(floor.bytes),
            split.pieces,
            split.axis,
            why,
        )
        analysis = analyse()
        try:
            return analysis, tune(analysis), splits
        except NothingFitsError as again:
            error = again
    error.args = (f"{error}; gave up after splitting {len(splits)} ops",)
    error.analysis, error.splits = analysis, splits
    raise error
