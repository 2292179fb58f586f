"""Whether splitting is needed, and worth its cost (lms/split/fit.py decides what to split):
a step no swap plan can fit (`past_swapping`), a floor no split lowers (`unsplittable_floor`),
and a round whose splits pay for themselves in the swap traffic they save (`splits_pay`).

Splitting is the lever after every swapping parameter, but not always the dearer one: a plan
that fits with the fewest ops split can swap more bytes a step than a few more split ops would
move, and in chains (lms/split/chain.py) split ops move less still. So once a round fits, the
next is taken while it pays (`SWAPS_FOR_SPLITS`).
"""

from lms.errors import NothingFitsError
from lms.memory.lifetimes import largest_footprint
from lms.split.layouts import splittable
from lms.split.rewrite import SCOPE, op_bytes
from lms.values.budget import format_size


def past_swapping(analysis, budget: int) -> NothingFitsError | None:
    """When the largest op alone (its own device bytes, `largest_footprint`) is over the room the
    budget leaves beside the resident bytes and can be split: why no swap plan can fit (the
    error tuning would raise, without its closest plan), so that splitting starts without
    tuning swaps first (GoogLeNet 4096² b1 in 400 MiB: two tunings, paired reads and pools
    recomputed, 0.5 s of its 1.1 s of rounds decided on the model). None otherwise: tuning
    decides, and keeps the closest plan when the floor is an op no split lowers."""
    floor, room = largest_footprint(analysis), budget - analysis.resident_bytes
    if room <= 0 or floor.bytes <= room:
        return None
    if splittable(analysis.graph.get_operation_by_name(floor.name)) is not None:
        return None
    return NothingFitsError(
        f"no LMS parameters fit the budget of {format_size(budget)}: the largest operation, "
        f"{floor.name}, needs {format_size(floor.bytes)} and resident variables and inputs "
        f"{format_size(analysis.resident_bytes)}: no swapping gets under "
        f"{format_size(floor.bytes + analysis.resident_bytes)}",
        analysis=analysis,
    )


def unless_past_swapping(analysis, budget: int, recomputed):
    """`analysis`, unless no swap plan can fit it (`past_swapping`): then raises why, with the
    analysis tuning would have left (`recomputed()`: max pools recomputed where oneDNN pairs
    them, lms/graph/pool_reads.py), so that splitting starts without tuning swaps."""
    past = past_swapping(analysis, budget)
    if past is not None and any(t.paired_with for t in analysis.tensors):
        analysis = recomputed()
        past = past_swapping(analysis, budget)
    if past is not None:
        raise past
    return analysis


def unsplittable_floor(graph, analysis, room: int) -> str | None:
    """The op of `analysis` (the model, lms/split/modelled.py) whose own bytes are over `room`
    and that cannot be split: no round lowers its floor (DeepLabV3+ 1024² b1 in 400 MiB went
    through six modelled rounds at 507 MiB, then split round by round, 87 s to say so). None
    when the floor is under the room or a piece (made ones are named `_piece_floor`)."""
    floor = largest_footprint(analysis)
    if floor.bytes <= room or floor.name.startswith(f"{SCOPE}/"):
        return None
    op = graph.get_operation_by_name(floor.name)
    return floor.name if splittable(op) is not None else None


# a round after the first that fits is taken while its swaps move fewer bytes a step than the
# first's by more than this share of the bytes of the ops it adds to the split ones (inputs and
# outputs: what split alone they would move; in chains they move less). A plan that fits
# with the fewest ops split can swap more than splitting a few more would move (400 MiB,
# measured: GoogLeNet 2048² b1 split 25 ops, its swaps 9.2 GB a step, 9.9 GB read from the
# host, 5.2 s a step, where 72 ops read 6.4 GB, 4.7 s; ResNet50 2560² 803 ops 81.5 GB, 34.8
# s, 1009 ops 74.4 GB, 32.9 s)
SWAPS_FOR_SPLITS = 0.5


def swap_traffic(analysis, tuned) -> int:
    """The bytes a tuned plan's swaps move a step: out, and in as often as they come back."""
    plan = tuned.plan
    return 0 if plan is None else plan.swapped_bytes(analysis) + plan.swapped_in_bytes(analysis)


def splits_pay(graph, chosen: tuple, split: list, traffic: int) -> bool:
    """Whether splitting `split` (entries: op name first) in place of `chosen`'s ops (a round
    that fits, its swap traffic) saves more swap traffic than SWAPS_FOR_SPLITS of the bytes of
    the ops it adds."""
    before = {entry[0] for entry in chosen[0] + chosen[1]}
    added = sum(op_bytes(graph.get_operation_by_name(e[0])) for e in split if e[0] not in before)
    return chosen[2] - traffic > SWAPS_FOR_SPLITS * added
