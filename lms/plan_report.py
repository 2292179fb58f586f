"""`build_report`: the `lms.PlanReport` of a tuned plan, what `LMS.report` holds."""

from lms.graph.names import STREAMED_LISTS
from lms.memory.explain import explain_peak
from lms.memory.lifetimes import largest_footprint
from lms.values.report import AnalysisSummary, PlanReport, Timeline


def build_report(analysis, tuned, budget, timings, planned=None, splits=()) -> PlanReport:
    """What a plan is: its budget (the measured peak's limit) and the budget it was planned for
    (lower after the closed loop's corrections), simulated peaks, swaps, the peak explained, the
    timeline; `calibration` (added by LMSFunction) says what the loop measured."""
    plan = tuned.plan
    planned = budget if planned is None else planned
    return PlanReport(
        budget_bytes=budget,
        planned_budget_bytes=planned,
        fits=tuned.simulation.peak_bytes <= planned,
        lms_needed=plan is not None,
        parameters=tuned.parameters.as_dict(),
        peak_bytes_without_lms=tuned.baseline.peak_bytes,
        peak_op_without_lms=tuned.baseline.peak_op,
        peak_bytes_with_lms=tuned.simulation.peak_bytes,
        peak_op_with_lms=tuned.simulation.peak_op,
        host_peak_bytes=tuned.simulation.host_peak_bytes,
        swapped_tensors=plan.swap_count if plan else 0,
        swap_ins=plan.swap_in_count if plan else 0,
        swapped_bytes=plan.swapped_bytes(analysis) if plan else 0,
        swapped_in_bytes=plan.swapped_in_bytes(analysis) if plan else 0,
        simulations=tuned.simulations,
        # what holds memory at the (planned) peak and why it was not swapped
        peak=explain_peak(analysis, tuned.simulation, plan),
        # the op that sets the swap-only floor, with its kernel's temporary
        analysis=AnalysisSummary.from_dict(
            {**analysis.summary(), "floor_op": largest_footprint(analysis).as_dict()}
        ),
        timings_s=timings,
        # the simulated memory over the step, max-pooled to at most TIMELINE_POINTS points (peaks
        # kept): enough for a report's plot, small enough for a record
        timeline=Timeline(
            _pooled(tuned.baseline.device),
            _pooled(tuned.simulation.device) if plan else None,
            _pooled(tuned.simulation.host) if plan else None,
        ),
        splits=tuple(split.as_dict() for split in splits),
        swapped_lists=_swapped_lists(analysis, plan),
        dropped_swaps=(tuned.dropped or None) if plan else None,
        streamed_lists=getattr(analysis.graph, STREAMED_LISTS, 0) or None,
        splits_modelled=True if analysis.modelled and splits else None,
    )


def _swapped_lists(analysis, plan) -> int | None:
    """How many of the plan's swaps are a loop's tensor lists (lms/device/lists.py); None for
    none, as a record that does not name them loads."""
    if plan is None:
        return None
    count = sum(analysis.tensors[swap.tensor].list_element is not None for swap in plan.swaps)
    return count or None


TIMELINE_POINTS = 300


def _pooled(values) -> tuple[int, ...]:
    values = list(values)
    if len(values) <= TIMELINE_POINTS:
        return tuple(int(v) for v in values)
    size = -(-len(values) // TIMELINE_POINTS)
    return tuple(int(max(values[i : i + size])) for i in range(0, len(values), size))
