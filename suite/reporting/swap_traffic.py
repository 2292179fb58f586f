"""A host's swap traffic per step as the report prints it (`Metrics.lms_traffic`, from
`lms.LMSFunction.traffic()`, read through `suite.reporting.lms_view`): swaps and bytes each way,
and a bandwidth only where a copy's own duration was measured (issue 27: a number is measured by
what its label says, or not shown).

Records before traffic version 2 timed the swap ops, which on the emulated device without a link
is a dictionary lookup (their "54-85 GB/s"): their seconds are never shown as a bandwidth.

On a GPU the swaps, bytes and seconds are the profiled step's copies matched to LMS's swaps
(`source` "copy events"): what ran, which a GPU's graph passes can make differ from the plan, so
the plan's swaps and bytes are shown beside them.
"""

from suite.records import TrialRecord
from suite.reporting.lms_view import Traffic, traffic
from suite.units import format_bytes

# Traffic.copy when its seconds are copies' own, and how the report names them
MEASURED = {"emulated link": "emulated link's transfers", "GPU copy events": "GPU's copies"}
# why there is no bandwidth otherwise
UNMEASURED = {
    "none": "no copy: emulated device without a link",
    "not profiled": "GPU copies not profiled",
    "two devices": "no copy events: two logical CPU devices",
    None: "bandwidth not measured (record before swap traffic v2)",
}


def _bandwidth(measured: list[Traffic], direction: str) -> str:
    """GB/s over all measured processes: their bytes over their seconds, "—" if none moved."""
    ways = [getattr(t, direction) for t in measured]
    timed = [way for way in ways if way.bandwidth and way.seconds is not None]
    seconds = sum(way.seconds for way in timed)
    if not seconds:
        return "—"
    moved = sum(way.bandwidth * way.seconds for way in timed)
    return f"{moved / seconds / 1e9:.3g}"


def _planned(records: list[TrialRecord]) -> str | None:
    """The plan's bytes and swaps each way per step (mean over the processes measured from copy
    events that record them), e.g. "planned 131 MiB / 189 MiB, 143 / 194 swaps"; None where no
    process was measured from copy events."""
    keys = ("out_bytes", "in_bytes", "swap_outs", "swap_ins")
    plans = []
    for record in records:
        table = record.metrics.lms_traffic if record.metrics is not None else None
        if table is None or table.source != "copy events":
            continue
        values = [getattr(table, f"planned_{key}_per_step") for key in keys]
        if None not in values:  # records before the plan's swaps were written beside them
            plans.append(values)
    if not plans:
        return None
    means = [sum(column) / len(plans) for column in zip(*plans, strict=True)]
    out_bytes, in_bytes, outs, ins = means
    return (
        f"planned {format_bytes(out_bytes)} / {format_bytes(in_bytes)}, "
        f"{outs:.0f} / {ins:.0f} swaps"
    )


def traffic_text(records: list[TrialRecord]) -> str:
    """The swap traffic of a host's trial processes, per step: bytes each way, swaps, the plan's
    beside them where a GPU's copy events measured them, and the measured bandwidth or why there
    is none, e.g. "131 MiB / 189 MiB (143 / 194 swaps; emulated link's transfers 1.98 / 1.97
    GB/s)", "120 MiB / 189 MiB (131 / 194 swaps; planned 131 MiB / 189 MiB, 143 / 194 swaps;
    GPU's copies 11.9 / 12.4 GB/s)"."""
    found = [t for t in (traffic(r.metrics) for r in records) if t]
    if not found:
        return "—"

    def mean(direction, what):
        return sum(getattr(getattr(t, direction), what) for t in found) / len(found)

    text = f"{format_bytes(mean('out', 'bytes'))} / {format_bytes(mean('into', 'bytes'))}"
    text += f" ({mean('out', 'swaps'):.0f} / {mean('into', 'swaps'):.0f} swaps; "
    planned = _planned(records)
    if planned:
        text += f"{planned}; "
    measured = [t for t in found if t.copy in MEASURED]
    if not measured:
        reasons = dict.fromkeys(UNMEASURED.get(t.copy, f"copy {t.copy!r}") for t in found)
        return text + "; ".join(reasons) + ")"
    kinds = " and ".join(dict.fromkeys(MEASURED[t.copy] for t in measured))
    text += f"{kinds} {_bandwidth(measured, 'out')} / {_bandwidth(measured, 'into')} GB/s"
    if len(measured) < len(found):
        text += f" in {len(measured)} of {len(found)} processes"
    return text + ")"
