"""GPU only: the bandwidth of a step's host<->device copies, from the copies' own events.

On a GPU, TensorFlow's profiler (CUPTI) records every copy as an event on the device plane,
named "MemcpyD2H" (device to host: swap-outs) or "MemcpyH2D" (host to device: swap-ins), with
its duration on the copy engine and a "memcpy_details" stat, "kind_src:... kind_dst:...
size:<bytes> dest:... async:..." (tsl's cupti_collector). Bytes over those durations is what
the copy engines moved and how fast, not the swap ops' bookkeeping. It counts every copy of the
step, the input batch's too; with LMS the swaps are nearly all of them.

Nothing here runs without a GPU: the parsing is tested on a real profile of this machine with a
device plane added as the collector writes one (tests/lms/test_copy_events.py).
"""

import re

DIRECTIONS = {"MemcpyD2H": "out", "MemcpyH2D": "in"}
_SIZE = re.compile(r"\bsize:(\d+)")


def copy_totals(space) -> dict:
    """{"out"/"in": (copies, bytes, seconds)} of the GPU planes' copy events in an XSpace;
    a copy whose size is not recorded is left out (it could not give a bandwidth)."""
    totals = {}
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                direction = DIRECTIONS.get(plane.event_metadata[event.metadata_id].name)
                size = _copy_size(event, stat_names) if direction else None
                if size is None:
                    continue
                copies, nbytes, seconds = totals.get(direction, (0, 0, 0.0))
                totals[direction] = (copies + 1, nbytes + size, seconds + event.duration_ps / 1e12)
    return totals


def _copy_size(event, stat_names) -> int | None:
    for stat in event.stats:
        if stat_names.get(stat.metadata_id) == "memcpy_details":
            details = stat.str_value or stat_names.get(stat.ref_value, "")
            match = _SIZE.search(details)
            return int(match.group(1)) if match else None
    return None


def profile_copies(callable_, *args) -> dict:
    """Run `callable_(*args)` once under the profiler; its copies' `copy_totals` ({} without a
    GPU)."""
    from lms.profile import profiled_space

    return copy_totals(profiled_space(callable_, *args))
