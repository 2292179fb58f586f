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


def stream_loop_lists(swaps, concrete, batch_size=None) -> bool:
    """Stream the loops' lists of `concrete` element by element, where `swaps` (a mechanism's)
    is the host store and lists can be; whether any were. TensorFlow's copies (a GPU) are not
    streamed (lms/device/list_streams.py), nor a graph streamed already."""
    if swaps.copies_lists or getattr(concrete.graph, STREAMED_LISTS, 0):
        return False
    lists = streamable_lists(concrete.graph, lambda t: tensor_bytes(t, batch_size))
    if not lists:
        return False
    stream_lists(concrete.graph, swaps, lists)
    log.info(
        "LMS: nothing fits with the loops' tensor lists swapped whole; streaming %d of them "
        "(%s) through the host store element by element",
        len(lists),
        format_size(sum(s.bytes for s in lists)),
    )
    return True


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
