"""Simulate device and host memory over one step, with or without a swap plan (DESIGN.md §2.3).

Execution is modelled one op at a time in topological-level order, with the next op's outputs
allocated while the current op runs (two ops in flight; not within serialized levels). Identity
and IdentityN do not gate their readers (Grappler removes them). A buffer is allocated when its
producer runs and freed after its last reader (aliases included); the step's
outputs live to the end; variables and inputs are resident throughout. With a plan, a swapped
tensor's device buffer lives until its swap-out and its near readers; each swap-in allocates a
copy after its trigger, freed after the group's last reader; the host holds the tensor from the
swap-out to its last swap-in. Unlike TFLMSv2's simulator it counts kernel temporaries, those of
the kernel set the step runs with (`Analysis.kernels`, lms/kernels.py): a oneDNN convolution or a
cuDNN workspace about as large as the op's largest tensor, Eigen's gradients' working-set col
buffers (those also while the op before runs, in the free order); the largest temporary of a
step is added to it. It still ignores allocator rounding and element-wise kernels writing into
their input's buffer (modelling that made the error larger, not smaller);
`benchmarks/lms_emulated.py` measures the error left.
"""

from dataclasses import dataclass

import numpy as np

from lms.graph import Analysis
from lms.kernels import temporaries
from lms.ordering import order_positions
from lms.padding import ADOPTING_OPS, REPLACING_OPS, Update, padding_curve
from lms.planner import Plan

# Element-wise kernels that write their output into an input's buffer when nothing else holds
# it (TensorFlow's forward_input_or_allocate_output): the input's last reader, of the output's
# size. Measured (MobileNetV2, enforced order): batch norm's backward Mul chain at the peak.
# Checked against allocator traces (ResNet50, TensorFlow's order): these ops allocated nothing
# where the simulation forwarded, except Mul (31 of 189: the order). BiasAdd and a Relu after it
# do allocate on the CPU, but Grappler's remapper fused the convolution before them into the
# same kernel (_FusedConv2D), so the convolution's own output never existed: one buffer, as
# forwarding counts it.
FORWARDING_OPS = frozenset(
    {
        "Abs", "Add", "AddN", "AddV2", "BiasAdd", "Div", "Elu", "EluGrad", "Erf", "Exp",
        "LeakyRelu", "LeakyReluGrad", "Log", "Maximum", "Minimum", "Mul", "Neg", "Pow",
        "RealDiv", "Relu", "Relu6", "Relu6Grad", "ReluGrad", "Rsqrt", "RsqrtGrad", "Selu",
        "SeluGrad", "Sigmoid", "SigmoidGrad", "Softplus", "SoftplusGrad", "Sqrt", "SqrtGrad",
        "Square", "SquaredDifference", "Sub", "Tanh", "TanhGrad",
    }
)  # fmt: skip


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

    def summary(self) -> dict:
        return {
            "peak_bytes": int(self.peak_bytes),
            "peak_op": self.peak_op,
            "host_peak_bytes": int(self.host.max()) if len(self.host) else 0,
            "steps": self.steps,
        }


# Ops that only rename their inputs (output k is input k): Grappler's dependency optimizer removes
# them, so they gate nothing at run time. Keras 3's optimizer passes every gradient through one
# IdentityN; taken as a barrier it would keep all gradients alive until the first update.
TRANSPARENT_OPS = frozenset({"Identity", "IdentityN"})


def execution_levels(analysis: Analysis) -> np.ndarray:
    """Each op's level when transparent ops do not gate their readers (longest path)."""
    level_of = np.zeros(len(analysis.ops), dtype=np.int64)
    ready = np.zeros(len(analysis.tensors), dtype=np.int64)  # level after which a tensor exists
    for wave in analysis.levels:  # analysis levels are a topological order
        for i in wave:
            op = analysis.ops[i]
            level = 0
            for t in op.inputs:
                level = max(level, ready[t] + 1)
            for c in op.control_inputs:
                level = max(level, level_of[c] + 1)
            level_of[i] = level
            if op.type in TRANSPARENT_OPS and len(op.inputs) == len(op.outputs):
                for source, t in zip(op.inputs, op.outputs, strict=True):
                    ready[t] = ready[source]
            else:
                ready[op.outputs] = level
    return level_of


def schedule(analysis: Analysis, plan: Plan | None = None) -> tuple[np.ndarray, int]:
    """Step index of every op, and the number of steps: one op per step. A plan with an enforced
    order runs in that order; otherwise in execution-level order (ties by creation order): GPUs
    run kernels one stream at a time, and the CPU executor's inter-op threads are few;
    concurrency is added back as the overlap term of `simulate`."""
    if plan is not None and plan.order is not None:
        return order_positions(analysis), len(plan.order)
    if "schedule" not in analysis.cache:
        levels = execution_levels(analysis)
        order = np.lexsort((np.arange(len(levels)), levels))
        step_of = np.empty(len(levels), dtype=np.int64)
        step_of[order] = np.arange(len(levels))
        analysis.cache["schedule"] = (step_of, len(levels))
    return analysis.cache["schedule"]


@dataclass
class _Lifetimes:
    """What does not depend on the plan, as arrays: each buffer's first and last step without
    LMS, the steps' new buffers and kernel temporaries. Computed once per analysis, so that a
    simulation with a plan only revisits the swapped tensors."""

    roots: np.ndarray  # tensor index of every buffer that is allocated on the device
    sizes: np.ndarray
    first: np.ndarray
    last: np.ndarray  # last reader's step (or the end, for the step's outputs)
    tensor_last: np.ndarray  # per tensor: its own last reader's step (-1: none)
    members: dict  # root -> tensors living in it (aliases), for roots with more than one
    index: dict  # root -> its position in the arrays
    output_roots: frozenset  # roots of the step's outputs (live to the end)
    base: np.ndarray  # device bytes per step from these buffers (not cumulated), length steps+1
    overlap: np.ndarray  # bytes the next op allocates while this one runs
    transient: np.ndarray  # kernel temporaries per step
    early: np.ndarray  # per step: 1 where its temporary is allocated while the op before runs
    forwarding: tuple  # (step, output buffer, input buffer) arrays: who may write into what


def _lifetimes(analysis: Analysis, plan: Plan | None = None) -> _Lifetimes:
    ordered = plan is not None and plan.order is not None
    key = ("ordered_lifetimes" if ordered else "lifetimes", analysis.kernels)
    if key in analysis.cache:
        return analysis.cache[key]
    step_of, steps = schedule(analysis, plan)
    tensors, ops = analysis.tensors, analysis.ops
    count = len(tensors)
    producer = np.fromiter((t.producer for t in tensors), np.int64, count)
    root_of = np.fromiter((t.buffer for t in tensors), np.int64, count)
    tensor_last = np.full(count, -1, dtype=np.int64)
    for t, info in enumerate(tensors):
        if info.consumers:
            tensor_last[t] = max(step_of[c] for c, _ in info.consumers)
    roots = np.flatnonzero(root_of == np.arange(count))
    first = step_of[producer[roots]]
    last = np.maximum(first, _group_max(root_of, tensor_last, count)[roots])
    is_output = np.zeros(count, dtype=bool)
    is_output[root_of[analysis.outputs]] = True
    last[is_output[roots]] = steps - 1
    sizes = np.fromiter((tensors[r].bytes for r in roots), np.int64, len(roots))
    placeholder = np.fromiter((ops[tensors[r].producer].type == "Placeholder" for r in roots), bool)
    on_device = (sizes > 0) & ~placeholder
    roots, sizes = roots[on_device], sizes[on_device]
    first, last = first[on_device], last[on_device]
    base = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(base, first, sizes)
    np.add.at(base, last + 1, -sizes)
    allocated = np.zeros(steps + 1, dtype=np.int64)
    np.add.at(allocated, first, sizes)
    overlap = np.append(allocated[1:steps], 0) if steps else allocated[:0]
    if ordered:  # chained: the next op starts when this one has finished
        overlap = np.zeros_like(overlap)
    transient = np.zeros(steps + 1, dtype=np.int64)
    held, per_op = _kernel_temporaries(analysis)
    side_by_side = np.zeros(steps + 1, dtype=np.int64)
    for index, size in enumerate(per_op):
        if size:
            transient[step_of[index]] = max(transient[step_of[index]], size)
        if held.side_by_side[index] and held.bytes[index]:
            side_by_side[step_of[index]] = max(side_by_side[step_of[index]], held.bytes[index])
    early = np.zeros(steps, dtype=np.int64)
    if not ordered and steps:
        # the next op, in flight beside this one, holds an Eigen kernel's buffer too
        overlap = overlap + np.append(side_by_side[1:steps], 0)
        early[1:] = side_by_side[1:steps] > 0
    members = {}
    for t in np.flatnonzero(root_of != np.arange(count)):
        members.setdefault(int(root_of[t]), [int(root_of[t])]).append(int(t))
    index = {int(r): k for k, r in enumerate(roots)}
    output_roots = frozenset(int(r) for r in root_of[analysis.outputs])
    forwarding = _forwarding_candidates(analysis, step_of, index, sizes, output_roots)
    result = _Lifetimes(
        roots,
        sizes,
        first,
        last,
        tensor_last,
        members,
        index,
        output_roots,
        base,
        overlap,
        transient[:steps],
        early,
        forwarding,
    )
    analysis.cache[key] = result
    return result


def _kernel_temporaries(analysis: Analysis) -> tuple:
    """The kernel set's temporaries (`lms.kernels.temporaries`) and, per op, the bytes it holds
    while it runs (that or a called body's own peak): computed once per analysis and kernels."""
    key = ("temporaries", analysis.kernels)
    if key not in analysis.cache:
        held = temporaries(analysis, analysis.kernels)
        per_op = [max(op.temp_bytes, held.bytes[i]) for i, op in enumerate(analysis.ops)]
        analysis.cache[key] = (held, per_op)
    return analysis.cache[key]


@dataclass(frozen=True)
class Footprint:
    """The op that sets the swap-only floor: what it alone holds on the device while it runs."""

    name: str
    bytes: int  # its inputs' and outputs' buffers and its kernel temporary
    temporary_bytes: int  # of which the kernel's temporary (workspace, col buffer)

    def as_dict(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "temporary_bytes": self.temporary_bytes}


def largest_footprint(analysis: Analysis) -> Footprint:
    """The running op whose own device bytes are largest: the distinct buffers it reads and
    writes (not the step's inputs, counted with the resident bytes; an output that a forwarding
    kernel writes into an input of its size counted once), plus its kernel's temporary under
    `analysis.kernels`. No swap plan brings the step's device peak below this plus the resident
    variables and inputs: the floor that sets how far swapping alone can reach. Unlike
    `analysis.largest_op` (TFLMSv2's "largest operation", inputs + outputs) it counts the
    workspaces, which decide the floor of a 3D convolution's gradient."""
    key = ("footprint", analysis.kernels)
    if key in analysis.cache:
        return analysis.cache[key]
    tensors, ops = analysis.tensors, analysis.ops
    _, held = _kernel_temporaries(analysis)
    best = Footprint("", 0, 0)
    for index, op in enumerate(ops):
        if not op.runs or not op.outputs:
            continue
        buffers = {
            tensors[t].buffer
            for t in op.inputs + op.outputs
            if ops[tensors[tensors[t].buffer].producer].type != "Placeholder"
        }
        own = sum(tensors[b].bytes for b in buffers)
        if op.type in FORWARDING_OPS and len(op.outputs) == 1:
            out = op.outputs[0]
            sizes = {tensors[tensors[t].buffer].bytes for t in op.inputs if t != out}
            if tensors[out].bytes in sizes:  # written into an input's buffer
                own -= tensors[out].bytes
        temporary = held[index]
        if own + temporary > best.bytes:
            best = Footprint(op.name, own + temporary, temporary)
    analysis.cache[key] = best
    return best


def _forwarding_candidates(analysis, step_of, index, sizes, output_roots) -> tuple:
    """Per forwarding op and input of its output's size (in the kernel's order of preference):
    its step, its output's buffer and the input's buffer (positions in the lifetime arrays)."""
    rows = []
    tensors = analysis.tensors
    for i, op in enumerate(analysis.ops):
        if op.type not in FORWARDING_OPS or len(op.outputs) != 1:
            continue
        out = op.outputs[0]
        if tensors[out].buffer != out or out not in index:
            continue
        roots = [tensors[t].buffer for t in op.inputs]
        for root in roots:
            k = index.get(root)
            if k is None or root in output_roots or roots.count(root) > 1:
                continue
            if sizes[k] == sizes[index[out]]:
                rows.append((step_of[i], index[out], k))
    if not rows:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty
    array = np.array(rows, dtype=np.int64)
    return array[:, 0], array[:, 1], array[:, 2]


def forwarded(analysis: Analysis, static: _Lifetimes, last: np.ndarray, copies=(), step_of=None):
    """Which outputs are written into an input's buffer, given the buffers' last steps (and a
    plan's swap-in copies with the schedule): the output buffers' positions, their steps, and
    the allocations they take over (positions in the lifetime arrays; copies follow the buffers,
    in the order given). An input forwards when this op is its last reader; the first counts."""
    step, out, source = static.forwarding
    usable = last[source] == step
    chosen, first_row = np.unique(out[usable], return_index=True)
    at, sources = step[usable][first_row], source[usable][first_row]
    taken, more = set(chosen.tolist()), []
    for position, (tensor, _, finish, swap_in) in enumerate(copies):
        for consumer, _ in swap_in.consumers:
            op = analysis.ops[consumer]
            if step_of[consumer] != finish or op.type not in FORWARDING_OPS:
                continue
            k = static.index.get(op.outputs[0]) if len(op.outputs) == 1 else None
            if k is None or k in taken or static.sizes[k] != analysis.tensors[tensor].bytes:
                continue
            taken.add(k)
            more.append((k, finish, len(static.sizes) + position))
    if more:
        extra = np.array(more, dtype=np.int64)
        chosen = np.concatenate([chosen, extra[:, 0]])
        at = np.concatenate([at, extra[:, 1]])
        sources = np.concatenate([sources, extra[:, 2]])
    return chosen, at, sources


def _group_max(groups: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    result = np.full(count, -1, dtype=np.int64)
    np.maximum.at(result, groups, values)
    return result


def simulate(analysis: Analysis, plan: Plan | None = None, allocator=None) -> Simulation:
    """Device and host bytes per step. `allocator` (a callable making a fresh
    `lms.allocator.BestFitAllocator`) adds what TensorFlow's allocator gives beyond the bytes
    asked: each allocation's chunk as the allocator would place the step's allocations."""
    step_of, steps = schedule(analysis, plan)
    static = _lifetimes(analysis, plan)
    device = static.base.copy()
    host = np.zeros(steps + 1, dtype=np.int64)
    last, copies = static.last, ()
    if plan:
        last, copies = _add_swaps(analysis, plan, static, step_of, steps, device, host)
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
        placed = (last, copies, forwarding)  # computed above: not again for the replay
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


@dataclass
class SwapLifetimes:
    """Where a plan moves memory: swapped buffers' new last step on the device, each swap-in's
    copy on the device (tensor, first step, last step) and each swapped tensor's host interval."""

    device_last: dict  # root tensor -> last step on the device
    copies: list  # (tensor, begin, finish, swap_in)
    host: list  # (tensor, swap-out step, last swap-in step)


def swap_lifetimes(analysis: Analysis, plan: Plan) -> SwapLifetimes:
    """In an enforced order the rewriter chains the swaps (lms/rewriter.py): a swap-out runs
    between its tensor's producer and the anchor after it, which waits for it, so the device
    buffer is gone before that anchor runs; a swap-in's copy runs between its trigger and the
    anchor after the trigger. Otherwise a swap-out is taken to run with the op after the
    producer."""
    from lms.planner import swap_out_waiter

    step_of, steps = schedule(analysis, plan)
    static = _lifetimes(analysis, plan)
    tensors = analysis.tensors

    def swap_out_step(swap) -> int:
        """The last step at which the swapped tensor's buffer is on the device for its
        swap-out."""
        producer = step_of[tensors[swap.tensor].producer]
        waiter = swap_out_waiter(analysis, plan, swap)
        if waiter >= 0:
            return int(max(producer, step_of[waiter] - 1))
        return int(min(producer + 1, steps - 1))

    new_last = {}
    rerouted = {swap.tensor: {c for s in swap.swap_ins for c in s.consumers} for swap in plan.swaps}
    for swap in plan.swaps:
        info = tensors[swap.tensor]
        root = info.buffer
        if root in new_last or root not in static.index:
            continue
        k = static.index[root]
        out_step = swap_out_step(swap)
        last = max(static.first[k], out_step)
        for member in static.members.get(root, [root]):
            skip = rerouted.get(member, ())
            for consumer in tensors[member].consumers:
                if consumer not in skip:
                    last = max(last, step_of[consumer[0]])
        if root in static.output_roots:
            last = steps - 1
        new_last[root] = int(last)
    copies, host = [], []
    for swap in plan.swaps:
        out_step = swap_out_step(swap)
        host_end = out_step
        for swap_in in swap.swap_ins:
            begin = max(step_of[swap_in.trigger] + 1, out_step + 1)
            finish = max(step_of[c] for c, _ in swap_in.consumers)
            begin = min(begin, finish)
            copies.append((swap.tensor, int(begin), int(finish), swap_in))
            host_end = max(host_end, int(begin))
        host.append((swap.tensor, out_step, host_end))
    return SwapLifetimes(new_last, copies, host)


def _add_swaps(analysis, plan, static, step_of, steps, device, host) -> tuple:
    """Shorten the swapped buffers' device lifetimes, add the swap-ins' copies and the host's;
    return the buffers' last steps on the device and the copies."""
    moved = swap_lifetimes(analysis, plan)
    new_last = static.last.copy()
    for root, last in moved.device_last.items():
        k = static.index[root]
        size = static.sizes[k]
        device[static.last[k] + 1] += size
        device[last + 1] -= size
        new_last[k] = last
    for tensor, begin, finish, _ in moved.copies:
        size = analysis.tensors[tensor].bytes
        device[begin] += size
        device[finish + 1] -= size
    for tensor, out_step, host_end in moved.host:
        size = analysis.tensors[tensor].bytes
        host[out_step] += size
        host[host_end + 1] -= size
    return new_last, moved.copies


def placement(analysis: Analysis, plan: Plan | None = None) -> tuple:
    """The buffers' last steps on the device once the plan's swaps are in, the swap-ins'
    copies, and which outputs are forwarded (`forwarded`)."""
    step_of, _ = schedule(analysis, plan)
    static = _lifetimes(analysis, plan)
    last, copies = static.last.copy(), ()
    if plan:
        moved = swap_lifetimes(analysis, plan)
        for root, end in moved.device_last.items():
            last[static.index[root]] = end
        copies = moved.copies
    return last, copies, forwarded(analysis, static, last, copies, step_of)


def buffers(analysis: Analysis, plan: Plan | None = None, placed=None):
    """Every device allocation of the step as arrays (first step, last step, bytes, and the
    allocation whose buffer it takes over, or -1): buffers (with a plan: swapped ones until their
    swap-out, and the swap-ins' copies) and kernel temporaries (first == last, or the step before
    for an Eigen buffer allocated beside the op before, in the free order), in the order an
    allocator sees them within a step: outputs, then the temporary. A forwarded output starts the
    step after its op, in its input's buffer (bytes 0 if it dies there); also returned: how many
    of the allocations are op outputs. `placed`: `placement(analysis, plan)`, if at hand."""
    static = _lifetimes(analysis, plan)
    last, copies, (outputs, at, sources) = placed or placement(analysis, plan)
    first, last, sizes = static.first.copy(), last.copy(), static.sizes.copy()
    extra = [(begin, finish, analysis.tensors[t].bytes) for t, begin, finish, _ in copies]
    inherit = np.full(len(sizes), -1, dtype=np.int64)
    if len(outputs):
        inherit[outputs] = sources
        first[outputs] = at + 1
        dies = last[outputs] < at + 1
        sizes[outputs[dies]] = 0
        inherit[outputs[dies]] = -1
        last[outputs[dies]] = at[dies]
        first[outputs[dies]] = at[dies]
    temps = np.flatnonzero(static.transient)
    extra += [(int(s - static.early[s]), int(s), int(static.transient[s])) for s in temps]
    if extra:
        more = np.array(extra, dtype=np.int64)
        first = np.concatenate([first, more[:, 0]])
        last = np.concatenate([last, more[:, 1]])
        sizes = np.concatenate([sizes, more[:, 2]])
        inherit = np.concatenate([inherit, np.full(len(more), -1, dtype=np.int64)])
    return first, last, sizes, inherit, len(static.sizes)


def _padding(analysis, plan, steps: int, allocator, overlap: np.ndarray, placed) -> np.ndarray:
    """Per step, the chunks' bytes beyond the bytes asked (lms/padding.py)."""
    first, last, sizes, inherit, count = buffers(analysis, plan, placed)
    step_of, _ = schedule(analysis, plan)
    index = _lifetimes(analysis, plan).index
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
        (first, last, sizes, inherit),
        count,
        updates,
        analysis.resident_bytes,
        steps,
        allocator,
        overlap,
    )
