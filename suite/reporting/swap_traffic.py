"""A host's swap traffic per step as the report prints it (`metrics.lms_traffic`, from
`lms.LMSFunction.traffic()`): swaps and bytes each way, and a bandwidth only where a copy's own
duration was measured (issue 27: a number is measured by what its label says, or not shown).

Records before traffic version 2 timed the swap ops, which on the emulated device without a link
is a dictionary lookup (their "54-85 GB/s"): their seconds are never shown as a bandwidth.
"""

from suite.units import format_bytes

# lms_traffic["copy"] whose seconds are copies' own, and how the report names them
MEASURED = {"emulated link": "emulated link's transfers", "GPU copy events": "GPU's copies"}
# why there is no bandwidth otherwise
UNMEASURED = {
    "none": "no copy: emulated device without a link",
    "not profiled": "GPU copies not profiled",
    None: "bandwidth not measured (record before swap traffic v2)",
}


def _copy(traffic: dict) -> str | None:
    """How the record's seconds were measured; None for a record before version 2."""
    return traffic.get("copy") if traffic.get("version", 1) >= 2 else None


def _bandwidth(measured: list[dict], direction: str) -> str:
    """GB/s over all measured processes: their bytes over their seconds, "—" if none moved."""
    timed = [t for t in measured if t[f"{direction}_bandwidth"]]
    seconds = sum(t[f"{direction}_seconds_per_step"] for t in timed)
    if not seconds:
        return "—"
    moved = sum(t[f"{direction}_bandwidth"] * t[f"{direction}_seconds_per_step"] for t in timed)
    return f"{moved / seconds / 1e9:.3g}"


def traffic_text(records) -> str:
    """The swap traffic of a host's trial processes, per step: bytes each way, swaps, and the
    measured bandwidth or why there is none, e.g. "131 MiB / 189 MiB (143 / 194 swaps;
    emulated link's transfers 1.98 / 1.97 GB/s)"."""
    traffic = [r["metrics"]["lms_traffic"] for r in records if r["metrics"].get("lms_traffic")]
    if not traffic:
        return "—"

    def mean(key):
        return sum(t[key] for t in traffic) / len(traffic)

    text = f"{format_bytes(mean('out_bytes_per_step'))} / {format_bytes(mean('in_bytes_per_step'))}"
    text += f" ({mean('swap_outs_per_step'):.0f} / {mean('swap_ins_per_step'):.0f} swaps; "
    measured = [t for t in traffic if _copy(t) in MEASURED]
    if not measured:
        reasons = dict.fromkeys(UNMEASURED.get(_copy(t), f"copy {_copy(t)!r}") for t in traffic)
        return text + "; ".join(reasons) + ")"
    kinds = " and ".join(dict.fromkeys(MEASURED[_copy(t)] for t in measured))
    text += f"{kinds} {_bandwidth(measured, 'out')} / {_bandwidth(measured, 'in')} GB/s"
    if len(measured) < len(traffic):
        text += f" in {len(measured)} of {len(traffic)} processes"
    return text + ")"
