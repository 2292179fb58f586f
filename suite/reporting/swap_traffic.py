"""A host's swap traffic per step as the report prints it (`Metrics.lms_traffic`, from
`lms.LMSFunction.traffic()`, read through `suite.reporting.lms_view`): swaps and bytes each way,
and a bandwidth only where a copy's own duration was measured (issue 27: a number is measured by
what its label says, or not shown).

Records before traffic version 2 timed the swap ops, which on the emulated device without a link
is a dictionary lookup (their "54-85 GB/s"): their seconds are never shown as a bandwidth.
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


def traffic_text(records: list[TrialRecord]) -> str:
    """The swap traffic of a host's trial processes, per step: bytes each way, swaps, and the
    measured bandwidth or why there is none, e.g. "131 MiB / 189 MiB (143 / 194 swaps;
    emulated link's transfers 1.98 / 1.97 GB/s)"."""
    found = [t for t in (traffic(r.metrics) for r in records) if t]
    if not found:
        return "—"

    def mean(direction, what):
        return sum(getattr(getattr(t, direction), what) for t in found) / len(found)

    text = f"{format_bytes(mean('out', 'bytes'))} / {format_bytes(mean('into', 'bytes'))}"
    text += f" ({mean('out', 'swaps'):.0f} / {mean('into', 'swaps'):.0f} swaps; "
    measured = [t for t in found if t.copy in MEASURED]
    if not measured:
        reasons = dict.fromkeys(UNMEASURED.get(t.copy, f"copy {t.copy!r}") for t in found)
        return text + "; ".join(reasons) + ")"
    kinds = " and ".join(dict.fromkeys(MEASURED[t.copy] for t in measured))
    text += f"{kinds} {_bandwidth(measured, 'out')} / {_bandwidth(measured, 'into')} GB/s"
    if len(measured) < len(found):
        text += f" in {len(measured)} of {len(found)} processes"
    return text + ")"
