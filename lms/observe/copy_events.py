"""GPU only: a step's host<->device copies, from the copies' own events, and which of them were
LMS's swaps.

On a GPU, TensorFlow's profiler (CUPTI) records every copy as an event on the device plane,
named "MemcpyD2H" (device to host: swap-outs) or "MemcpyH2D" (host to device: swap-ins), with
its duration on the copy engine, a "memcpy_details" stat, "kind_src:... kind_dst:...
size:<bytes> dest:... async:..." (tsl's cupti_collector), and a "tf_op" stat, "name:type", the
TensorFlow op in whose annotation the copy was issued: for a copy between a device and its host
in one process, the `_Send` or the `_Recv` of the partitioner's pair on the edge. Bytes over
those durations is what the copy engines moved and how fast, not the swap ops' bookkeeping.

`copy_totals` counts every copy of the step, the input batch's too; `swap_copies` only those
whose `tf_op` is the pair of a swap (lms/observe/copy_match.py `copy_names`), the rest apart.

Nothing here runs without a GPU: the parsing is tested on a real profile of this machine with a
device plane added as the collector writes one, its `tf_op` names those of a real two-device
step's pairs (tests/lms/observe/test_copy_events.py).
"""

import re
from dataclasses import dataclass

DIRECTIONS = {"MemcpyD2H": "out", "MemcpyH2D": "in"}
_SIZE = re.compile(r"\bsize:(\d+)")
_KIND = {"out": re.compile(r"\bkind_dst:(\S+)"), "in": re.compile(r"\bkind_src:(\S+)")}


@dataclass(frozen=True)
class CopyEvent:
    """One copy on a device plane."""

    direction: str  # "out" (device to host) or "in"
    bytes: int | None  # None: the event has no size (it gives no bandwidth)
    start_ps: int  # on the profiler's clock
    seconds: float
    op: str | None  # the TensorFlow op (node name) whose annotation it ran in; None: none
    host_memory: str | None = None  # the host side's memory kind: "pinned", "pageable", ...


def stat_value(event, stat_names: dict, name: str) -> str | None:
    """The string value of `event`'s stat `name` (inline, or a reference to a stat metadata
    whose name is the value, as the collector writes repeated strings); None without it."""
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == name:
            return stat.str_value or stat_names.get(stat.ref_value, "")
    return None


def tf_op_name(event, stat_names: dict) -> str | None:
    """The node name of `event`'s "tf_op" stat ("name:type" -> "name"); None without one."""
    value = stat_value(event, stat_names, "tf_op")
    return value.rpartition(":")[0] or value if value else None


def copy_events(space) -> list:
    """The `CopyEvent`s of the GPU planes of an XSpace, by start."""
    found = []
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            base = line.timestamp_ns * 1000
            for event in line.events:
                direction = DIRECTIONS.get(plane.event_metadata[event.metadata_id].name)
                if direction is None:
                    continue
                details = stat_value(event, stat_names, "memcpy_details")
                size = _SIZE.search(details) if details else None
                kind = _KIND[direction].search(details) if details else None
                found.append(
                    CopyEvent(
                        direction,
                        int(size.group(1)) if size else None,
                        base + event.offset_ps,
                        event.duration_ps / 1e12,
                        tf_op_name(event, stat_names),
                        kind.group(1) if kind else None,
                    )
                )
    return sorted(found, key=lambda e: e.start_ps)


def _add(totals: dict, event: CopyEvent) -> None:
    copies, nbytes, seconds = totals.get(event.direction, (0, 0, 0.0))
    totals[event.direction] = (copies + 1, nbytes + event.bytes, seconds + event.seconds)


def copy_totals(space) -> dict:
    """{"out"/"in": (copies, bytes, seconds)} of the GPU planes' copy events in an XSpace;
    a copy whose size is not recorded is left out (it could not give a bandwidth)."""
    totals = {}
    for event in copy_events(space):
        if event.bytes is not None:
            _add(totals, event)
    return totals


@dataclass(frozen=True)
class SwapCopies:
    """A profiled step's copies, those of LMS's swaps apart from the others."""

    swaps: dict  # {"out"/"in": (copies, bytes, seconds)} of copies matched to a swap
    others: dict  # the same of the other copies (the input batch's, ...)
    transfers: frozenset  # the swaps (transfer names) at least one copy was matched to

    def to_dict(self) -> dict:
        return {"swaps": self.swaps, "others": self.others, "transfers": sorted(self.transfers)}


def swap_copies(space, names: dict) -> SwapCopies:
    """The copy events of `space` matched to swaps by `names` ({send/recv node name: (transfer,
    direction)}, lms/observe/copy_match.py `copy_names`): a copy is a swap's if its `tf_op` is
    either node of the swap's pair and its direction is the swap's. Copies without a size count in
    neither total (no bandwidth), but their swap is still seen."""
    swaps, others, transfers = {}, {}, set()
    for event in copy_events(space):
        match = names.get(event.op) if event.op else None
        matched = match is not None and match[1] == event.direction
        if matched:
            transfers.add(match[0])
        if event.bytes is not None:
            _add(swaps if matched else others, event)
    return SwapCopies(swaps, others, frozenset(transfers))
