"""Per-tensor swap choice: the swaps of a fitting plan that its budget does not need, dropped.

Why: TFLMSv2's threshold decides for every tensor at once. The largest threshold that fits swaps
every tensor idle that long, also those whose absence from the device lowers no step near the
peak (a tensor produced and read back long before the peak, a small tensor whose bytes matter
nowhere). Each swap costs its transfers (`transfer_seconds`: the mechanism's cost of a swap-out
or swap-in, `Mechanism.transfer_cost`); dropping one costs memory only over the steps its buffer
was off the device. A loop's accumulated tensor lists keep their swaps (measured: `_candidates`).

How: the plan's simulated device curve shows where room is left. Dropping the swaps of one
buffer (all of its views' at once: a view's swap-in must not come back while its buffer is still
on the device, lms/planning/planner.py `_useful`) puts the buffer back on the device from its
swap-out to its old last reader, and takes its swap-ins' copies off. The buffers are tried in
order of transfer seconds saved per byte, each dropped when the curve plus its change stays
within the budget (the curve then takes the change). One simulation checks the plan left; when
the effects the curve does not model (forwarding, the copies' own order) push it over, fewer are
dropped (a binary search over the same order, `CHECKS` simulations at most).
"""

import dataclasses
import logging
from dataclasses import dataclass

import numpy as np

from lms.graph.step import Analysis
from lms.memory.lifetimes import lifetimes
from lms.memory.simulator import Simulation, simulate, swaplifetimes
from lms.planning.planner import Plan
from lms.values.link import Link

log = logging.getLogger("lms")
CHECKS = 5  # simulations that may check a pruned plan before the plan is kept as it was


@dataclass(frozen=True)
class Pruned:
    """A plan with the swaps it does not need dropped, its simulation, and what it took."""

    plan: Plan
    simulation: Simulation
    dropped: int  # swaps dropped
    simulations: int


def transfer_seconds(analysis: Analysis, plan: Plan, cost: Link) -> float:
    """What the plan's transfers cost on `cost` (each swap-out and swap-in `cost.seconds` of its
    buffer's bytes): the step-time model's bytes moved and transfers, without overlap."""
    return sum(_swap_seconds(analysis, swap, cost) for swap in plan.swaps)


def _swap_seconds(analysis: Analysis, swap, cost: Link) -> float:
    nbytes = analysis.buffer_bytes(swap.tensor)
    return cost.seconds(nbytes, "out") + len(swap.swap_ins) * cost.seconds(nbytes, "in")


def prune(
    analysis: Analysis, plan: Plan, simulation: Simulation, budget_bytes: int, cost: Link
) -> Pruned:
    """`plan` (simulated as `simulation`, within `budget_bytes`) less the swaps the budget does
    not need, cheapest to keep first (see the module docstring)."""
    order, changes = _candidates(analysis, plan, cost)
    curve = simulation.device.astype(np.int64).copy()
    dropped = []
    for root in order:
        lo, delta = changes[root]
        window = curve[lo : lo + len(delta)]
        if len(window) and int((window + delta[: len(window)]).max()) <= budget_bytes:
            window += delta[: len(window)]
            dropped.append(root)
    if not dropped:
        return Pruned(plan, simulation, 0, 0)

    def without(count: int) -> Plan:
        roots = set(dropped[:count])
        kept = [s for s in plan.swaps if analysis.tensors[s.tensor].buffer not in roots]
        return dataclasses.replace(plan, swaps=kept)

    # the largest prefix of `dropped` whose plan the simulation keeps within the budget
    low, high, checks, best = 0, len(dropped), 0, None
    while low < high and checks < CHECKS:
        middle = high if best is None and checks == 0 else (low + high + 1) // 2
        candidate = without(middle)
        simulated = simulate(analysis, candidate)
        checks += 1
        if simulated.peak_bytes <= budget_bytes:
            low, best = middle, (candidate, simulated)
        else:
            high = middle - 1
    if best is None:
        return Pruned(plan, simulation, 0, checks)
    kept, simulated = best
    count = len(plan.swaps) - len(kept.swaps)
    log.info(
        "Dropped %d of %d swaps the budget does not need (%.1f ms of transfers a step less)",
        count,
        len(plan.swaps),
        1e3 * (transfer_seconds(analysis, plan, cost) - transfer_seconds(analysis, kept, cost)),
    )
    return Pruned(kept, simulated, count, checks)


def _candidates(analysis: Analysis, plan: Plan, cost: Link) -> tuple[list, dict]:
    """The swapped buffers in the order they are tried (transfer seconds per byte kept on the
    device, most first) and, per buffer, what dropping its swaps changes on the device curve:
    (first step, bytes per step from there)."""
    static = lifetimes(analysis, plan)
    moved = swaplifetimes(analysis, plan)
    steps = len(static.transient)
    seconds = {}
    for swap in plan.swaps:
        root = analysis.tensors[swap.tensor].buffer
        if analysis.tensors[swap.tensor].list_element is not None:
            # a loop's accumulated list left on the device measures more than simulated: three
            # LSTMs (64 tokens, b16, tests/support/_lstm_step.py) with 4 of 16 lists' swaps
            # dropped measured 12.4 MiB, 1.17x the simulation; all swapped 11.0, 1.08x
            continue
        seconds[root] = seconds.get(root, 0.0) + _swap_seconds(analysis, swap, cost)
    copies_of = {}
    for copy in moved.copies:
        copies_of.setdefault(analysis.tensors[copy.tensor].buffer, []).append(copy)
    changes = {}
    for root in seconds:
        segments = []
        if root in moved.device_last and root in static.index:
            k = static.index[root]
            back, old = moved.device_last[root] + 1, int(static.last[k])
            if back <= old:  # the buffer stays on the device to its old last reader
                segments.append((back, old, int(static.sizes[k])))
        for copy in copies_of.get(root, []):  # its copies are no longer made
            segments.append((copy.begin, copy.finish, -analysis.buffer_bytes(copy.tensor)))
        if not segments:
            changes[root] = (0, np.zeros(0, dtype=np.int64))
            continue
        lo = min(s[0] for s in segments)
        hi = min(max(s[1] for s in segments), steps - 1)
        delta = np.zeros(max(0, hi - lo + 2), dtype=np.int64)
        for begin, end, size in segments:
            delta[begin - lo] += size
            delta[min(end, hi) + 1 - lo] -= size
        changes[root] = (lo, np.cumsum(delta)[: hi - lo + 1])
    weight = {root: seconds[root] / max(1, _bytes_held(changes[root][1])) for root in seconds}
    return sorted(seconds, key=lambda root: -weight[root]), changes


def _bytes_held(delta: np.ndarray) -> int:
    """The memory a buffer takes back when its swaps are dropped: its bytes times the steps it is
    back (what it leaves less room for)."""
    return int(np.clip(delta, 0, None).sum())
