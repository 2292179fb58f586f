"""Auto-tune LMS parameters with binary searches over simulations (docs/lms.md).

TFLMSv2's order: the largest `swapout_threshold` that fits (fewest swaps), raising `sync_mode`
when none does; then the largest `swapin_ahead` that still fits (earliest swap-ins, most overlap);
then the largest `swapin_groupby` (fewest swap-ins). Parameters the user fixed are kept.

The searches simulate the bytes asked. With an allocator model, the plan found is then simulated
with the allocator's chunks (lms/memory/padding.py: too slow for every candidate), and when their
padding pushes it over the budget, the search runs again for a budget below that plan's own peak
by the excess; if none gets under, the closest is kept with a warning (see `tune`).
"""

import dataclasses
import logging
from dataclasses import dataclass

from lms.errors import NothingFitsError
from lms.graph.step import Analysis, GiB, collector_paused
from lms.memory.lifetimes import largest_footprint
from lms.memory.simulator import Simulation, simulate
from lms.planning.planner import Plan, plan
from lms.tuning.prune import prune
from lms.values.budget import format_size
from lms.values.link import Link
from lms.values.parameters import AUTO, Parameters

log = logging.getLogger("lms")
# ordering=-1 tries these in turn: the enforced depth-first order first (lms/planning/ordering.py),
# then TensorFlow's own. Enforced, the measured peak kept closer to the plan (worst measured /
# device memory over six models outside the suite and three processes each: 1.11, against 1.40 in
# TensorFlow's order, benchmarks/lms_promises.py) and the reach is far larger. The order is not
# free: with no swap, GoogLeNet 224² b4 ran at 0.77-0.92 of the plain step's speed (its branches
# one after another on two cores), C3D at 0.96; the step-time model does not count it. Nor is
# TensorFlow's order the faster when auto-tuned: it needs more swaps to fit its less predictable
# peak (GoogLeNet at 0.6x 0.56 against 0.64 of plain, the fan-out model 0.58 / 0.52 against
# 0.64 / 0.70 at 0.6x / 0.4x, ViT 0.83 against 0.78 / 0.73; lms_throughput.py --orderings 0).
AUTO_ORDERINGS = (1, 0)
# what the search picks (a plan with any of them given is the user's, applied as found)
TUNED_FIELDS = ("swapout_threshold", "swapin_ahead", "swapin_groupby")


@dataclass
class Tuned:
    parameters: Parameters
    plan: Plan | None  # None: LMS is not needed
    simulation: Simulation  # with the plan (or without LMS when not needed)
    baseline: Simulation  # without LMS
    simulations: int  # how many the search ran
    dropped: int = 0  # swaps of the parameters' plan the budget did not need (lms/tuning/prune.py)
    pruned_for: int | None = None  # the budget they were dropped for (None: not pruned)


def _largest_fitting(low: int, high: int, fits) -> int | None:
    """Largest value in [low, high] with fits(value), assuming fits is monotone decreasing."""
    if high < low or not fits(low):
        return None
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


# searches at lowered budgets when the allocator's padding pushes a plan over (each asks for a
# plan below the last one's own peak by the excess; the padding moves little between them)
PADDING_ATTEMPTS = 4


def tune(
    analysis: Analysis,
    budget_bytes: int,
    parameters: Parameters,
    allocator=None,
    cost: Link | None = None,
) -> Tuned:
    """The parameters that fit `budget_bytes` with the fewest swaps. `allocator` (a callable that
    makes a fresh `lms.memory.allocator.BestFitAllocator`) checks the plan with the allocator's
    chunks. `cost` (what a transfer costs the mechanism, `Mechanism.transfer_cost`): the plan
    found then drops the swaps the budget does not need, cheapest to keep first
    (lms/tuning/prune.py); None keeps the parameters' plan as it is.

    When no search gets the padded peak under the budget, the plan that swaps the most is taken
    if its chunks fit (`_floor_that_fits`); failing that, the plan with the lowest padded peak
    is kept (its bytes asked fit) with a warning, not refused: the padding depends on the
    allocator's history in the process (a heap grown by earlier, larger steps splits more and
    pads less: measured 50 MiB where 70 MiB was simulated from a fresh heap)."""
    with collector_paused():
        return _tune(analysis, budget_bytes, parameters, allocator, cost)


def _tune(analysis, budget_bytes, parameters, allocator, cost) -> Tuned:
    """`tune`'s work (run with the garbage collector paused)."""
    if allocator is None:
        return _search(analysis, budget_bytes, parameters, cost=cost)
    baseline = simulate(analysis, None, allocator)
    target, attempts = budget_bytes, []
    peaks = _Peaks(analysis)  # a candidate's peak does not depend on the budget searched for
    for _ in range(PADDING_ATTEMPTS):
        try:
            found = _search(analysis, target, parameters, peaks, cost)
        except NothingFitsError:
            if not attempts:
                raise
            break
        checked = simulate(analysis, found.plan, allocator)
        attempts.append(dataclasses.replace(found, simulation=checked, baseline=baseline))
        if checked.peak_bytes <= budget_bytes:
            return attempts[-1]
        log.info(
            "With the allocator's padding the plan's peak is %s, over the budget %s: tuning again",
            format_size(checked.peak_bytes),
            format_size(budget_bytes),
        )
        # below this plan's own (unpadded) peak by the excess, so that the search must move
        target = min(target, found.simulation.peak_bytes) - (checked.peak_bytes - budget_bytes)
    floor = _floor_that_fits(analysis, budget_bytes, parameters, allocator, baseline, peaks)
    if floor is not None:
        return floor
    best = min(attempts, key=lambda t: t.simulation.peak_bytes)
    log.warning(
        "With the allocator's padding the closest plan's simulated peak is %s, over the budget "
        "%s (its bytes asked fit): keeping it",
        format_size(best.simulation.peak_bytes),
        format_size(budget_bytes),
    )
    return best


def floor_parameters(parameters: Parameters) -> Parameters:
    """The plan that swaps the most: every tensor with a reader more than one op away, each
    reader its own swap-in one op ahead, in the enforced order (unless the free one is asked)."""
    ordering = 0 if parameters.ordering == 0 else 1
    return parameters.resolved(
        swapout_threshold=1, swapin_ahead=1, swapin_groupby=0, ordering=ordering
    )


def _floor_that_fits(
    analysis, budget_bytes, parameters, allocator, baseline, peaks
) -> Tuned | None:
    """The plan that swaps the most, when its chunks fit the budget where the searched plans'
    do not (parameters the user fixed are kept: None then).

    The searches rank plans by bytes asked; with the allocator's chunks the order can flip:
    GoogLeNet 1216² b2 for 640 MiB, the plan kept simulated 765 MiB with its chunks and
    measured 730, the plan that swaps the most simulated 628 and measured 610-625 in fresh
    processes. The closed loop would reach it only after corrections whose larger peaks grow
    the allocator's regions (measured 642 there after three)."""
    if any(getattr(parameters, name) != AUTO for name in TUNED_FIELDS):
        return None
    candidate = floor_parameters(parameters)
    made, _ = peaks.planned(candidate)
    padded = simulate(analysis, made, allocator)
    if padded.peak_bytes > budget_bytes:
        return None
    log.info(
        "With the allocator's padding only the plan that swaps the most fits: %s",
        format_size(padded.peak_bytes),
    )
    return Tuned(candidate, made, padded, baseline, 1)


class _Peaks:
    """The plans and simulations (bytes asked) of the candidates one `tune` tried, and its plain
    simulation: the searches at lowered budgets after the allocator's padding ask for many of the
    same candidates again, and each search's choice, its floor and its closest plan were tried
    in it."""

    def __init__(self, analysis: Analysis):
        self.analysis = analysis
        self.tried = {}  # candidate -> (its plan, its simulation)
        self._baseline = None

    def baseline(self) -> Simulation:
        if self._baseline is None:
            self._baseline = simulate(self.analysis)
        return self._baseline

    def planned(self, candidate: Parameters) -> tuple[Plan, Simulation]:
        if candidate not in self.tried:
            made = plan(self.analysis, candidate)
            self.tried[candidate] = made, simulate(self.analysis, made)
        return self.tried[candidate]

    def peak(self, candidate: Parameters) -> int:
        return self.planned(candidate)[1].peak_bytes


def _search(
    analysis: Analysis,
    budget_bytes: int,
    parameters: Parameters,
    peaks: _Peaks | None = None,
    cost: Link | None = None,
) -> Tuned:
    peaks = peaks or _Peaks(analysis)
    baseline = peaks.baseline()
    count = 1
    if baseline.peak_bytes <= budget_bytes:
        log.info(
            "LMS is not necessary: the simulated peak %.3f GiB fits the budget %.3f GiB",
            baseline.peak_bytes / GiB,
            budget_bytes / GiB,
        )
        return Tuned(parameters, None, baseline, baseline, count)
    cache = {}  # this search's candidates (counted as its simulations, even if tried before)

    def peak(candidate: Parameters) -> int:
        nonlocal count
        if candidate not in cache:
            count += 1
            cache[candidate] = peaks.peak(candidate)
        return cache[candidate]

    def fill(p: Parameters, **values) -> Parameters:
        return p.resolved(**{k: v for k, v in values.items() if getattr(p, k) == AUTO})

    chosen = None
    orderings = AUTO_ORDERINGS if parameters.ordering == AUTO else (parameters.ordering,)
    for ordering in orderings:
        # distances count levels, or ops of the enforced order
        span = len(analysis.ops) if ordering == 1 else len(analysis.levels)
        max_distance = max(1, span - 1)
        for sync_mode in range(parameters.sync_mode, 4):
            trial = parameters.resolved(sync_mode=sync_mode, ordering=ordering)
            start = fill(trial, swapin_ahead=1, swapin_groupby=0)

            def fits_threshold(value, start=start):
                return peak(fill(start, swapout_threshold=value)) <= budget_bytes

            if parameters.swapout_threshold == AUTO:
                threshold = _largest_fitting(1, max_distance, fits_threshold)
            else:
                fixed = parameters.swapout_threshold
                threshold = fixed if fits_threshold(fixed) else None
            if threshold is not None:
                chosen = fill(start, swapout_threshold=threshold)
                log.info(
                    "Found swapout_threshold=%d (sync_mode=%d, ordering=%d)",
                    threshold,
                    sync_mode,
                    ordering,
                )
                break
            log.info(
                "No swapout_threshold fits with sync_mode=%d, ordering=%d", sync_mode, ordering
            )
        if chosen is not None:
            break
    if chosen is None:
        best = min(cache.values(), default=baseline.peak_bytes)
        lowest = min(cache, key=cache.get) if cache else None
        floor = largest_footprint(analysis)  # its own buffers and its kernel's temporary
        temporary = (
            f" (its kernel's temporary {format_size(floor.temporary_bytes)})"
            if floor.temporary_bytes
            else ""
        )
        error = NothingFitsError(
            f"no LMS parameters fit the budget of {format_size(budget_bytes)}: the best simulated "
            f"peak is {format_size(best)} (without LMS {format_size(baseline.peak_bytes)}); the "
            f"largest operation, {floor.name}, needs {format_size(floor.bytes)}{temporary} "
            f"and resident variables and inputs {format_size(analysis.resident_bytes)}: no "
            f"swapping gets under {format_size(floor.bytes + analysis.resident_bytes)}"
        )
        if lowest is not None:  # what came closest, for reports that show the shortfall
            closest, simulation = peaks.planned(lowest)
            error.closest = Tuned(lowest, closest, simulation, baseline, count)
            error.analysis = analysis
        raise error
    if parameters.swapin_ahead == AUTO and not chosen.sync_mode & 2:
        ahead = _largest_fitting(
            1,
            max(1, chosen.swapout_threshold),
            lambda v: peak(chosen.resolved(swapin_ahead=v)) <= budget_bytes,
        )
        chosen = chosen.resolved(swapin_ahead=ahead or 1)
        log.info("Found swapin_ahead=%d", chosen.swapin_ahead)
    if parameters.swapin_groupby == AUTO:
        groupby = _largest_fitting(
            0,
            max(0, chosen.swapout_threshold),
            lambda v: peak(chosen.resolved(swapin_groupby=v)) <= budget_bytes,
        )
        chosen = chosen.resolved(swapin_groupby=groupby or 0)
        log.info("Found swapin_groupby=%d", chosen.swapin_groupby)
    final_plan, simulation = peaks.planned(chosen)
    if cost is None or any(getattr(parameters, name) != AUTO for name in TUNED_FIELDS):
        return Tuned(chosen, final_plan, simulation, baseline, count)
    pruned = prune(analysis, final_plan, simulation, budget_bytes, cost)
    count += pruned.simulations
    return Tuned(
        chosen, pruned.plan, pruned.simulation, baseline, count, pruned.dropped, budget_bytes
    )
