"""A limit's margin: the measured peaks at the largest size that trained and at the smallest that
did not, against the memory budget, and whether one process of each is enough to trust the limit.

The process is the sample. The same configuration peaks differently from one process to the next
(which free chunk the allocator hands a request, the order two threads run independent ops in):
measured here, GoogLeNet batch 8 at 160px 193-206 MiB over 20 processes and at 208px 257-282 MiB
over 15 (ranges of 6.5 % and 9.3 % of the peak), batch 8 at 224px 302.9 and 318.3 MB in two runs
of the smoke spec (5 %), against a 314.6 MB budget: its LMS-off max batch was 8 once and 7 once.

The spread of a boundary size is the larger of
- a band relative to its largest peak (the spec's `boundary_spread`, default 0.10: the widest
  range measured above), which stands in where one process is all there is, and where two or three
  happened to agree more closely than fifteen or twenty do;
- the range of the peaks its processes measured, where that is wider.

A side is near the budget when one of its peaks lies within its spread of the budget: another
process could land on the other side. Then both boundary sizes run in `boundary_repeats` more
processes. A side without a peak is judged so: a size that trained with no measured peak, or any
size without a budget to measure against (a real device), is near (nothing says it is not); a
size refused outright (the allocator's out-of-memory, LMS finding nothing that fits, a crash or a
time-out) is not, and the limit's side decides.

Verdicts: "clear" (neither side near: no repeat needed), "confirmed" (near, and every process
agrees: each one at the limit trained, none at the failing size did), "uncertain" (processes
disagree, or near and not repeated). Search records written before this have no `boundary`:
"not measured".
"""

from suite.records import BOUNDARY_VERDICTS
from suite.units import format_bytes

NOT_MEASURED = "not measured"
VERDICTS = BOUNDARY_VERDICTS


def process_margin(record: dict, budget: int | None) -> dict:
    """One process at a boundary size (its trial record): outcome, peak, and the margin."""
    peak = (record.get("metrics") or {}).get("peak_memory_bytes")
    measured = peak is not None and budget is not None
    return {
        "repeat": record["repeat"],
        "outcome": record["outcome"],
        "peak_memory_bytes": peak,
        "margin_bytes": budget - peak if measured else None,  # < 0: over the budget
        "peak_ratio": round(peak / budget, 4) if measured else None,
    }


def spread_bytes(peaks: list[int], band: float) -> float:
    """How far another process's peak may lie from these: the band, or their range if wider."""
    return max(band * max(peaks), max(peaks) - min(peaks))


def near_budget(processes: list[dict], budget: int | None, band: float) -> bool:
    """Whether another process of this size could land on the other side of the budget."""
    if budget is None:
        return True
    peaks = [p["peak_memory_bytes"] for p in processes if p["peak_memory_bytes"] is not None]
    if not peaks:  # trained without a peak: unknown; refused outright: far
        return any(p["outcome"] == "ok" for p in processes)
    spread = spread_bytes(peaks, band)
    return any(abs(peak - budget) <= spread for peak in peaks)


def verdict(limit: list[dict], failed: list[dict], near: bool) -> str:
    """The verdict on a boundary from its processes (an absent side: an empty list)."""
    agree = all(p["outcome"] == "ok" for p in limit) and all(p["outcome"] != "ok" for p in failed)
    if not agree:
        return "uncertain"
    if not near:
        return "clear"
    return "confirmed" if all(len(side) > 1 for side in (limit, failed) if side) else "uncertain"


def boundary_record(
    limit: dict | None, failed: dict | None, budget: int | None, band: float, repeats: int
) -> dict:
    """The search record's `boundary`: each side ({"value", "spec_hash", "processes"}, None when
    absent), the budget, the spread band, the repeats the spec asks for, nearness, the verdict."""
    near = is_near(limit, failed, budget, band)
    return {
        "limit": limit,
        "failed": failed,
        "budget_bytes": budget,
        "spread": band,
        "repeats": repeats,
        "near": near,
        "verdict": verdict(_processes(limit), _processes(failed), near),
    }


def _processes(side: dict | None) -> list[dict]:
    return side["processes"] if side else []


def is_near(limit: dict | None, failed: dict | None, budget: int | None, band: float) -> bool:
    """Whether the boundary must be repeated: a side's peak within the spread of the budget."""
    return any(near_budget(_processes(side), budget, band) for side in (limit, failed) if side)


def _side_text(side: dict | None) -> str:
    """ "0.96", "0.95–0.97" over processes, "out of memory" without a peak, "—" when absent."""
    if side is None:
        return "—"
    processes = side["processes"]
    ratios = [p["peak_ratio"] for p in processes if p["peak_ratio"] is not None]
    bare = [p for p in processes if p["peak_ratio"] is None]
    peaks = [p["peak_memory_bytes"] for p in bare if p["peak_memory_bytes"] is not None]
    parts = []
    for values in ([f"{r:.2f}" for r in sorted(ratios)], [format_bytes(p) for p in sorted(peaks)]):
        if values:  # ratios to the budget; bytes where there is no budget
            parts.append(values[0] if values[0] == values[-1] else f"{values[0]}–{values[-1]}")
    outcomes = {p["outcome"] for p in bare if p["peak_memory_bytes"] is None}
    parts += sorted("no peak" if o == "ok" else o.replace("_", " ") for o in outcomes)
    return " + ".join(parts)


def margin_text(search: dict) -> str:
    """ "confirmed: 0.96 / 1.01": the verdict, then the peak over the budget at the limit and at
    the first size that failed (a range over processes); "not measured" for older records."""
    boundary = search.get("boundary")
    if not _readable(boundary):
        return NOT_MEASURED
    return (
        f"{boundary['verdict']}: {_side_text(boundary['limit'])} / {_side_text(boundary['failed'])}"
    )


def _readable(boundary) -> bool:
    """Whether a record's `boundary` has what the margin is shown from (older records: none)."""
    if not isinstance(boundary, dict) or boundary.get("verdict") not in VERDICTS:
        return False
    fields = {"outcome", "peak_memory_bytes", "peak_ratio"}
    for side in (boundary.get("limit"), boundary.get("failed")):
        processes = side.get("processes") if isinstance(side, dict) else []
        if side is not None and not (
            isinstance(processes, list)
            and all(isinstance(p, dict) and fields <= set(p) for p in processes)
        ):
            return False
    return True


def is_uncertain(search: dict | None) -> bool:
    return bool(search) and (search.get("boundary") or {}).get("verdict") == "uncertain"
