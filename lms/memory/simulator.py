"""Simulate device and host memory over one step, with or without a swap plan (docs/lms.md).

Execution is modelled one op at a time in topological-level order, with the next op's outputs
allocated while the current op runs (two ops in flight; not within serialized levels). Identity
and IdentityN do not gate their readers (Grappler removes them). A buffer is allocated when its
producer runs and freed after its last reader (aliases included); the step's
outputs live to the end; variables and inputs are resident throughout. With a plan, a swapped
tensor's device buffer lives until its swap-out and its near readers; each swap-in allocates a
copy after its trigger, freed after the group's last reader; the host holds the tensor from the
swap-out to its last swap-in, and a split op's host array (`Analysis.host_arrays`) from its
first op to its last reader. Unlike TFLMSv2's simulator it counts kernel temporaries, those of
the kernel set the step runs with (`Analysis.kernels`, lms/graph/kernels.py): a oneDNN convolution
or a cuDNN workspace about as large as the op's largest tensor, Eigen's gradients' working-set col
buffers (those also while the op before runs, in the free order); the largest temporary of a
step is added to it. It still ignores allocator rounding and element-wise kernels writing into
their input's buffer (modelling that made the error larger, not smaller);
`benchmarks/lms_emulated.py` measures the error left.
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lms.graph.step import Analysis, CacheKey, Fact
from lms.memory.lifetimes import Forwarded, forwarded, lifetimes
from lms.memory.padding import ADOPTING_OPS, REPLACING_OPS, Update, padding_curve
from lms.memory.schedule import schedule
from lms.planning.planner import Plan, swap_out_waiter


@dataclass
class Simulation:
    peak_bytes: int
    peak_step: int
    peak_op: str  # the op running at the peak
    device: np.ndarray  # bytes per step
    host: np.ndarray  # bytes per step
    resident_bytes: int
    padding: np.ndarray | None = None  # per step: the allocator's chunks beyond the bytes asked
    in_flight: np.ndarray | None = None  # per step: the next op's outputs, allocated meanwhile

    @property
    def steps(self) -> int:
        return len(self.device)

    @property
    def host_peak_bytes(self) -> int:
        return int(self.host.max()) if len(self.host) else 0

    def summary(self) -> dict:
        return {
            "peak_bytes": int(self.peak_bytes),
            "peak_op": self.peak_op,
            "host_peak_bytes": self.host_peak_bytes,
            "steps": self.steps,
        }


def simulate(analysis: Analysis, plan: Plan | None = None, allocator=None) -> Simulation:
    """Device and host bytes per step. `allocator` (a callable making a fresh
    `lms.memory.allocator.BestFitAllocator`) adds what TensorFlow's allocator gives beyond the bytes
    asked: each allocation's chunk as the allocator would place the step's allocations."""
    step_of, steps = schedule(analysis, plan)
    static = lifetimes(analysis, plan)
    device = static.base.copy()
    host = np.zeros(steps + 1, dtype=np.int64)
    last, copies = static.last, ()
    if plan:
        last, copies = _add_swaps(analysis, plan, static, step_of, steps, device, host)
    if analysis.host_arrays:  # split ops' host arrays: not swaps
        sizes, members, starts = _host_array_layout(analysis)
        held = step_of[members]
        np.add.at(host, np.minimum.reduceat(held, starts), sizes)
        np.subtract.at(host, np.maximum.reduceat(held, starts) + 1, sizes)
    forwarding = forwarded(analysis, static, last, copies, step_of)
    outputs, at, _ = forwarding
    # a forwarded output takes its input's buffer: one buffer instead of two at its step
    np.subtract.at(device, at, static.sizes[outputs])
    np.add.at(device, at + 1, static.sizes[outputs])
    overlap = static.overlap
    if len(outputs) and overlap.any():
        overlap = overlap.copy()
        np.subtract.at(overlap, np.maximum(at - 1, 0), np.where(at > 0, static.sizes[outputs], 0))
    if plan and plan.serialized_levels and steps:
        # serialized ops are chained by control dependencies: nothing runs beside them
        overlap = overlap.copy()
        chained = [i for lv in plan.serialized_levels for i in analysis.levels[lv]]
        overlap[step_of[chained]] = 0
    device = np.cumsum(device)[:steps] + overlap + static.transient + analysis.resident_bytes
    padding = None
    if allocator is not None and steps:
        placed = Placement(last, copies, forwarding)  # computed above: not again for the replay
        padding = _padding(analysis, plan, steps, allocator(), overlap, placed)
        device = device + padding
    host = np.cumsum(host)[:steps]
    peak_step = int(np.argmax(device)) if steps else 0
    # one op per step: the op at the peak is the one scheduled there
    peak_op = analysis.ops[int(np.flatnonzero(step_of == peak_step)[0])].name if steps else ""
    peak = int(device[peak_step]) if steps else analysis.resident_bytes
    return Simulation(
        peak, peak_step, peak_op, device, host, analysis.resident_bytes, padding, overlap
    )


class SwapInCopy(NamedTuple):
    """A swap-in's copy on the device, from `begin` to `finish` (steps)."""

    tensor: int
    begin: int
    finish: int
    swap_in: object  # the plan's lms.planning.planner.SwapIn


class HostInterval(NamedTuple):
    """A swapped tensor on the host, from its swap-out to its last swap-in (steps)."""

    tensor: int
    out_step: int
    host_end: int


class Placement(NamedTuple):
    """Where a plan's buffers are: their last steps on the device once the swaps are in, the
    swap-ins' copies, and which outputs are forwarded."""

    last: np.ndarray
    copies: list  # [SwapInCopy]
    forwarded: Forwarded


class Allocations(NamedTuple):
    """Every device allocation of a step as parallel arrays, in the order an allocator sees them
    within a step; the first `outputs` are op outputs, the rest copies and temporaries."""

    first: np.ndarray
    last: np.ndarray
    sizes: np.ndarray
    inherit: np.ndarray  # the allocation whose buffer it takes over, or -1
    outputs: int


@dataclass
class SwapLifetimes:
    """Where a plan moves memory: swapped buffers' new last step on the device, each swap-in's
    copy on the device (tensor, first step, last step) and each swapped tensor's host interval."""

    device_last: dict  # root tensor -> last step on the device
    copies: list  # [SwapInCopy]
    host: list  # [HostInterval]


def swaplifetimes(analysis: Analysis, plan: Plan) -> SwapLifetimes:
    """In an enforced order the rewriter chains the swaps (lms/device/rewriter.py): a swap-out runs
    between its tensor's producer and the anchor after it, which waits for it, so the device
    buffer is gone before that anchor runs; a swap-in's copy runs between its trigger and the
    anchor after the trigger. Otherwise a swap-out is taken to run with the op after the
    producer."""
    schedule_of, steps = schedule(analysis, plan)
    name = "positions" if plan.order is not None else "steps"
    step_of = analysis.as_list(name, lambda: schedule_of)
    static = lifetimes(analysis, plan)
    tensors = analysis.tensors
    # a swap-out's waiter depends on the tensor alone once the order is enforced (the tuner
    # simulates dozens of plans that swap mostly the same tensors): found once per analysis
    waiters = _swap_out_waiters(analysis) if plan.order is not None else None

    def swap_out_step(swap) -> int:
        """The last step at which the swapped tensor's buffer is on the device for its
        swap-out."""
        producer = step_of[tensors[swap.tensor].producer]
        if waiters is None:
            waiter = swap_out_waiter(analysis, plan, swap)
        else:
            waiter = waiters.get(swap.tensor)
            if waiter is None:
                waiter = waiters[swap.tensor] = swap_out_waiter(analysis, plan, swap)
        if waiter >= 0:
            return max(producer, step_of[waiter] - 1)
        return min(producer + 1, steps - 1)

    out_steps = [swap_out_step(swap) for swap in plan.swaps]
    new_last = {}
    rerouted = {swap.tensor: {c for s in swap.swap_ins for c in s.consumers} for swap in plan.swaps}
    for swap, out_step in zip(plan.swaps, out_steps, strict=True):
        info = tensors[swap.tensor]
        root = info.buffer
        if root in new_last or root not in static.index:
            continue
        k = static.index[root]
        last = max(int(static.first[k]), out_step)
        for member in static.members.get(root, [root]):
            skip = rerouted.get(member, ())
            for consumer in tensors[member].consumers:
                if consumer not in skip:
                    last = max(last, step_of[consumer[0]])
        if root in static.output_roots:
            last = steps - 1
        new_last[root] = last
    copies, host = [], []
    for swap, out_step in zip(plan.swaps, out_steps, strict=True):
        host_end = out_step
        for swap_in in swap.swap_ins:
            begin = max(step_of[swap_in.trigger] + 1, out_step + 1)
            finish = max(step_of[c] for c, _ in swap_in.consumers)
            begin = min(begin, finish)
            copies.append(SwapInCopy(swap.tensor, begin, finish, swap_in))
            host_end = max(host_end, begin)
        host.append(HostInterval(swap.tensor, out_step, host_end))
    return SwapLifetimes(new_last, copies, host)


def _swap_out_waiters(analysis: Analysis) -> dict:
    """Per swapped tensor, the op that waits for its swap-out in the enforced order
    (`lms.planning.planner.swap_out_waiter`, -1: none), filled as plans swap them."""
    key = CacheKey(Fact.SWAP_OUT_WAITERS)
    if key not in analysis.cache:
        analysis.cache[key] = {}
    return analysis.cache[key]


def _add_swaps(analysis, plan, static, step_of, steps, device, host) -> tuple:
    """Shorten the swapped buffers' device lifetimes, add the swap-ins' copies and the host's;
    return the buffers' last steps on the device and the copies."""
    moved = swaplifetimes(analysis, plan)
    new_last = static.last.copy()
    for root, last in moved.device_last.items():
        k = static.index[root]
        size = static.sizes[k]
        device[static.last[k] + 1] += size
        device[last + 1] -= size
        new_last[k] = last
    for tensor, begin, finish, _ in moved.copies:
        size = analysis.buffer_bytes(tensor)
        device[begin] += size
        device[finish + 1] -= size
    for tensor, out_step, host_end in moved.host:
        size = analysis.buffer_bytes(tensor)
        host[out_step] += size
        host[host_end + 1] -= size
    for step, size in list_staging(analysis, plan, static, new_last):
        device[step] += size
        device[step + 1] -= size
    return new_last, moved.copies


def list_staging(analysis: Analysis, plan: Plan, static, last) -> list:
    """[(step, bytes)]: a swapped tensor list's stacked copy, beside the list at its swap-out's
    last step, where the host store's mechanism stacks lists (`Analysis.stacked_lists`,
    lms/device/lists.py). `last`: the buffers' last steps with the swaps in."""
    if not analysis.stacked_lists:
        return []
    staged = []
    for swap in plan.swaps:
        info = analysis.tensors[swap.tensor]
        if info.list_element is not None and info.buffer in static.index:
            staged.append((int(last[static.index[info.buffer]]), info.bytes))
    return staged


def _host_array_layout(analysis: Analysis) -> tuple:
    """`Analysis.host_arrays` as arrays, once per analysis (simulate runs per tuned plan):
    sizes, every array's ops one after another, and where each array's ops start."""
    key = CacheKey(Fact.HOST_ARRAYS)
    if key not in analysis.cache:
        arrays = analysis.host_arrays
        sizes = np.array([size for size, _ in arrays], dtype=np.int64)
        members = np.concatenate([np.asarray(ops, dtype=np.int64) for _, ops in arrays])
        starts = np.cumsum([0] + [len(ops) for _, ops in arrays[:-1]], dtype=np.int64)
        analysis.cache[key] = (sizes, members, starts)
    return analysis.cache[key]


def placement(analysis: Analysis, plan: Plan | None = None) -> Placement:
    """The buffers' last steps on the device once the plan's swaps are in, the swap-ins'
    copies, and which outputs are forwarded (`forwarded`)."""
    step_of, _ = schedule(analysis, plan)
    static = lifetimes(analysis, plan)
    last, copies = static.last.copy(), ()
    if plan:
        moved = swaplifetimes(analysis, plan)
        for root, end in moved.device_last.items():
            last[static.index[root]] = end
        copies = moved.copies
    return Placement(last, copies, forwarded(analysis, static, last, copies, step_of))


def buffers(analysis: Analysis, plan: Plan | None = None, placed=None) -> Allocations:
    """Every device allocation of the step as arrays (first step, last step, bytes, and the
    allocation whose buffer it takes over, or -1): buffers (with a plan: swapped ones until their
    swap-out, and the swap-ins' copies) and kernel temporaries (first == last, or the step before
    for an Eigen buffer allocated beside the op before, in the free order), in the order an
    allocator sees them within a step: outputs, then the temporary. A forwarded output starts the
    step after its op, in its input's buffer (bytes 0 if it dies there); also returned: how many
    of the allocations are op outputs. `placed`: `placement(analysis, plan)`, if at hand."""
    static = lifetimes(analysis, plan)
    last, copies, (outputs, at, sources) = placed or placement(analysis, plan)
    first, last, sizes = static.first.copy(), last.copy(), static.sizes.copy()
    extra = [(begin, finish, analysis.buffer_bytes(t)) for t, begin, finish, _ in copies]
    inherit = np.full(len(sizes), -1, dtype=np.int64)
    if len(outputs):
        inherit[outputs] = sources
        first[outputs] = at + 1
        dies = last[outputs] < at + 1
        sizes[outputs[dies]] = 0
        inherit[outputs[dies]] = -1
        last[outputs[dies]] = at[dies]
        first[outputs[dies]] = at[dies]
    for s in np.flatnonzero(static.transient):  # a body's temporary: its own allocations
        size, parts = int(static.transient[s]), static.transient_parts.get(int(s))
        begin = int(s - static.early[s])
        extra += [(begin, int(s), part) for part in (parts or (size,))]
    if plan:
        extra += [(s, s, size) for s, size in list_staging(analysis, plan, static, last)]
    if extra:
        more = np.array(extra, dtype=np.int64)
        first = np.concatenate([first, more[:, 0]])
        last = np.concatenate([last, more[:, 1]])
        sizes = np.concatenate([sizes, more[:, 2]])
        inherit = np.concatenate([inherit, np.full(len(more), -1, dtype=np.int64)])
    return Allocations(first, last, sizes, inherit, len(static.sizes))


def _padding(analysis, plan, steps: int, allocator, overlap: np.ndarray, placed) -> np.ndarray:
    """Per step, the chunks' bytes beyond the bytes asked (lms/memory/padding.py)."""
    allocations = buffers(analysis, plan, placed)
    last = allocations.last
    step_of, _ = schedule(analysis, plan)
    index = lifetimes(analysis, plan).index
    updates = []
    for i in np.argsort(step_of, kind="stable"):
        op = analysis.ops[i]
        if op.type not in ADOPTING_OPS | REPLACING_OPS or len(op.inputs) < 2:
            continue
        value = analysis.tensors[op.inputs[1]]
        size = analysis.tensors[value.buffer].bytes
        if not size:
            continue
        k = index.get(value.buffer, -1)
        adopts = op.type in ADOPTING_OPS and k >= 0 and last[k] == step_of[i]
        variable = analysis.tensors[op.inputs[0]].buffer
        updates.append(Update(int(step_of[i]), variable, size, k if adopts else -1))
    return padding_curve(
        allocations,
        updates,
        analysis.resident_bytes,
        steps,
        allocator,
        overlap,
    )
