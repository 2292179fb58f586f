"""The report's limits table: per workload, host and search, the largest size that trained with
LMS off and with LMS on, and the factor LMS gained (in pixels or voxels for resolution, in samples
for batch), and beside the gain the swap-only bound (`suite.reporting.swap_bound`): how far
swapping alone could go, and the op that sets it. Each limit's margin follows
(`suite.running.boundary`): its verdict, then the measured peak over the budget at the limit and at
the first size that failed; a gain from an uncertain limit says so."""

from collections import defaultdict

from tabulate import tabulate

from suite.records import SearchRecord, TrialRecord
from suite.reporting.swap_bound import bound_text, lms_reports
from suite.running.boundary import is_uncertain, margin_text
from suite.units import format_bytes


def _limit_text(record: SearchRecord | None) -> str:
    if record is None:
        return "not searched"
    largest = record.largest_ok
    if largest is None:
        return f"none (< {record.range[0]})"
    return f"≥ {largest} (stop)" if record.stop_reached else str(largest)


def _rate_at_limit(record: SearchRecord | None) -> float | None:
    """images/sec of the trial at the largest size that trained."""
    if record is None or record.largest_ok is None:
        return None
    for trial in record.trials:
        if trial.value == record.largest_ok and trial.outcome == "ok":
            return trial.images_per_sec
    return None


def gain_text(off: SearchRecord | None, on: SearchRecord | None) -> str:
    if not off or not on or on.largest_ok is None:
        return "—"
    if off.largest_ok is None:
        return "only with LMS"
    ratio = on.largest_ok / off.largest_ok
    if on.searched == "resolution":
        info = on.params.info
        text = f"{ratio**info.spatial_dims:.2f}× {info.element}"
    else:
        text = f"{ratio:.2f}× batch"
    notes = ["at least"] if on.stop_reached else []
    notes += ["uncertain"] if is_uncertain(off) or is_uncertain(on) else []
    return text + (f" ({', '.join(notes)})" if notes else "")


def margin_cell(record: SearchRecord | None) -> str:
    """ "confirmed: 0.96 / 1.01" (suite.running.boundary); "—" where the mode was not searched."""
    return "—" if record is None else margin_text(record)


def rate_at_limit_text(record: SearchRecord | None) -> str:
    rate = _rate_at_limit(record)
    if rate is None:
        return "—"
    params, value = record.params, record.largest_ok
    info = params.info
    resolution = value if record.searched == "resolution" else params.resolution
    elements = rate * info.elements_per_sample(resolution) / 1e6
    return f"{rate:.3g} img/s, {elements:.3g} {info.rate_unit}"


def limits_table(
    search_records: list[SearchRecord], trial_records: list[TrialRecord]
) -> str | None:
    """One row per (search, host); the LMS-off and LMS-on searches side by side. The trial
    records hold the LMS reports the swap-only bound is estimated from."""
    reports = lms_reports(trial_records)
    pairs = defaultdict(dict)
    for record in search_records:  # newest record of each mode wins
        pairs[(record.limit_key, record.host)][record.mode] = record
    if not pairs:
        return None
    rows = []
    for (_, host), modes in sorted(pairs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        any_record = modes.get("off") or modes.get("on")
        p = any_record.params
        fixed = f"batch {p.batch}" if any_record.searched == "resolution" else f"{p.resolution}px"
        off, on = modes.get("off"), modes.get("on")
        trials = "/".join(str(len(m.trials)) if m else "—" for m in (off, on))
        rows.append(
            [
                p.workload,
                f"max {any_record.searched} ({fixed}, {p.precision})",
                host,
                format_bytes(p.memory_budget_bytes) if p.memory_budget_bytes else "device",
                _limit_text(off),
                _limit_text(on),
                gain_text(off, on),
                bound_text(off, on, reports),
                margin_cell(off),
                margin_cell(on),
                rate_at_limit_text(off),
                rate_at_limit_text(on),
                trials,
            ]
        )
    headers = [
        "workload",
        "search",
        "host",
        "memory",
        "LMS off",
        "LMS on",
        "LMS gain",
        "swap-only bound",
        "peak/budget off",
        "peak/budget on",
        "rate at limit, off",
        "rate at limit, on",
        "trials off/on",
    ]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)
