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
disagree, or near and not repeated). Search records written before this have no `boundary`
(None; also one older suites wrote without what the margin is shown from): "not measured".
"""

from suite.records import Boundary, BoundarySide, ProcessMargin, SearchRecord, TrialRecord
from suite.units import format_bytes

NOT_MEASURED = "not measured"


def process_margin(record: TrialRecord, budget: int | None) -> ProcessMargin:
    """One process at a boundary size (its trial record): outcome, peak, and the margin."""
    peak = record.metrics.peak_memory_bytes if record.metrics else None
    measured = peak is not None and budget is not None
    return ProcessMargin(
        record.repeat,
        record.outcome,
        peak,
        budget - peak if measured else None,  # < 0: over the budget
        round(peak / budget, 4) if measured else None,
    )


def spread_bytes(peaks: list[int], band: float) -> float:
    """How far another process's peak may lie from these: the band, or their range if wider."""
    return max(band * max(peaks), max(peaks) - min(peaks))


def near_budget(processes, budget: int | None, band: float) -> bool:
    """Whether another process of this size could land on the other side of the budget."""
    if budget is None:
        return True
    peaks = [p.peak_memory_bytes for p in processes if p.peak_memory_bytes is not None]
    if not peaks:  # trained without a peak: unknown; refused outright: far
        return any(p.outcome == "ok" for p in processes)
    spread = spread_bytes(peaks, band)
    return any(abs(peak - budget) <= spread for peak in peaks)


def verdict(limit, failed, near: bool) -> str:
    """The verdict on a boundary from its processes (an absent side: no processes)."""
    agree = all(p.outcome == "ok" for p in limit) and all(p.outcome != "ok" for p in failed)
    if not agree:
        return "uncertain"
    if not near:
        return "clear"
    return "confirmed" if all(len(side) > 1 for side in (limit, failed) if side) else "uncertain"


def boundary_record(
    limit: BoundarySide | None,
    failed: BoundarySide | None,
    budget: int | None,
    band: float,
    repeats: int,
) -> Boundary:
    """The search record's `boundary`: each side (None when absent), the budget, the spread
    band, the repeats the spec asks for, nearness, the verdict."""
    near = is_near(limit, failed, budget, band)
    outcome = verdict(_processes(limit), _processes(failed), near)
    return Boundary(limit, failed, budget, band, repeats, near, outcome)


def _processes(side: BoundarySide | None) -> tuple:
    return side.processes if side else ()


def is_near(limit, failed, budget: int | None, band: float) -> bool:
    """Whether the boundary must be repeated: a side's peak within the spread of the budget."""
    return any(near_budget(_processes(side), budget, band) for side in (limit, failed) if side)


def _side_text(side: BoundarySide | None) -> str:
    """ "0.96", "0.95–0.97" over processes, "out of memory" without a peak, "—" when absent."""
    if side is None:
        return "—"
    ratios = [p.peak_ratio for p in side.processes if p.peak_ratio is not None]
    bare = [p for p in side.processes if p.peak_ratio is None]
    peaks = [p.peak_memory_bytes for p in bare if p.peak_memory_bytes is not None]
    parts = []
    for values in ([f"{r:.2f}" for r in sorted(ratios)], [format_bytes(p) for p in sorted(peaks)]):
        if values:  # ratios to the budget; bytes where there is no budget
            parts.append(values[0] if values[0] == values[-1] else f"{values[0]}–{values[-1]}")
    outcomes = {p.outcome for p in bare if p.peak_memory_bytes is None}
    parts += sorted("no peak" if o == "ok" else o.replace("_", " ") for o in outcomes)
    return " + ".join(parts)


def margin_text(search: SearchRecord) -> str:
    """ "confirmed: 0.96 / 1.01": the verdict, then the peak over the budget at the limit and at
    the first size that failed (a range over processes); "not measured" for older records."""
    boundary = search.boundary
    if boundary is None:
        return NOT_MEASURED
    return f"{boundary.verdict}: {_side_text(boundary.limit)} / {_side_text(boundary.failed)}"


def is_uncertain(search: SearchRecord | None) -> bool:
    return (
        search is not None
        and search.boundary is not None
        and (search.boundary.verdict == "uncertain")
    )
