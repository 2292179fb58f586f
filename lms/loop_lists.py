"""What the pipeline does about a step's loops (lms/graph/loops.py): the warning that names the
loop LMS cannot plan into, and the streaming of its tensor lists through the host store when no
plan fits with them swapped whole (lms/device/list_streams.py).

Why apart from the pipeline: both are about one kind of step, and the pipeline calls each once.
"""

import logging

from lms.device.list_streams import stream_lists, streamable_lists
from lms.graph.names import STREAMED_LISTS
from lms.graph.step import tensor_bytes
from lms.values.budget import format_size

log = logging.getLogger("lms")


def stream_loop_lists(swaps, concrete, batch_size=None, needed_bytes=None, count=None) -> list:
    """Stream loop lists of `concrete` element by element, where `swaps` (a mechanism's) is the
    host store and lists can be; those streamed now (StreamedList). TensorFlow's copies (a GPU)
    are not streamed (lms/device/list_streams.py).

    Which: the largest lists not streamed yet (`streaming_order`), as many as cover
    `needed_bytes` (a plan's excess over its budget), or the `count` largest, or all. Why not
    all at once: each element costs a py_func call each way, and the excess is often a list or
    two. Two LSTMs of 256 over 128 tokens at batch 8, 0.6x their peak: 1.7 MiB over, 16 lists of
    1 MiB; all streamed ran at 0.26 of the plain step's speed."""
    if swaps.copies_lists:
        return []
    found = streamable_lists(concrete.graph, lambda t: tensor_bytes(t, batch_size))
    groups = streaming_order(found)
    if count is not None:  # a calibration cache's: the same lists as the plan that held
        groups = _covering(groups, len, count)
    elif needed_bytes is not None:
        groups = _covering(groups, _group_bytes, needed_bytes)
    lists = [streamed for group in groups for streamed in group]
    if not lists:
        return []
    stream_lists(concrete.graph, swaps, lists)
    log.info(
        "LMS: nothing fits with the loops' tensor lists swapped whole; streaming %d more of "
        "them (%s) through the host store element by element (%d in all)",
        len(lists),
        format_size(sum(s.bytes for s in lists)),
        getattr(concrete.graph, STREAMED_LISTS, 0),
    )
    return lists


def streaming_order(lists) -> list[list]:
    """`lists` (StreamedList) in groups streamed together, in the order they are streamed: a
    loop's lists are one group, largest first, then by loop name, the same in
    every process (a calibration cache's count names the same lists).

    Why whole loops: a list holding another's elements an iteration later (an RNN's carried
    state) is sized as nothing by the analysis (lms/graph/loops.py), but keeps them on the device
    after the other is gone unless both are streamed. Two GRUs of 128 over 256 tokens at batch
    16, one loop's lists streamed and one of the other's: 13.1 MiB simulated, 20.7 measured."""
    groups = {}
    for streamed in lists:
        groups.setdefault(streamed.forward, []).append(streamed)
    ordered = sorted(groups.items(), key=lambda item: (-_group_bytes(item[1]), item[0]))
    return [sorted(group, key=lambda s: s.position) for _, group in ordered]


def _group_bytes(group) -> int:
    return sum(s.bytes for s in group)


def _covering(groups, size, target) -> list[list]:
    """The first of `groups` whose `size`s add up to `target` or more (all if they never do)."""
    covered = 0
    for k, group in enumerate(groups):
        if covered >= target:
            return groups[:k]
        covered += size(group)
    return groups


def loops_warning(loops, swappable: int = 0) -> str:
    """One line naming the loop LMS cannot plan into: its body runs as one op. Of the tensor
    lists it keeps for the gradient (lms/graph/loops.py), `swappable` bytes (all loops') can be
    swapped between the loops, stacked (lms/device/lists.py), or on the emulated device streamed
    within them when whole lists do not fit (lms/device/list_streams.py); the rest stay on the
    device."""
    name, size = loops[0]
    total = sum(s for _, s in loops)
    others = f" ({len(loops)} loops, {format_size(total)} in all)"
    if swappable >= total:
        kept = (
            "can be swapped between the loops as whole lists (on the emulated device streamed "
            "within them when whole lists do not fit)"
        )
    elif swappable:
        kept = (
            f"stay on the device but for {format_size(swappable)} of all loops' lists, which "
            "can be swapped between the loops (or streamed within them on the emulated device)"
        )
    else:
        kept = "stay on the device; they are counted in the plan's peak, not swapped"
    return (
        f"LMS cannot plan into the While loop '{name}': the {format_size(size)} its body keeps "
        f"for the gradient {kept}{others if len(loops) > 1 else ''}"
    )
