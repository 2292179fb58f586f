"""What of a step's memory does not depend on the plan, computed once per analysis: each
buffer's lifetime without LMS, the kernels' temporaries, which element-wise outputs may be
written into an input's buffer (`forwarded`), and the op that sets the swap-only floor
(`largest_footprint`)."""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from lms.graph.kernels import Temporaries, temporaries
from lms.graph.step import Analysis, CacheKey, Fact
from lms.memory.schedule import schedule
from lms.planning.planner import Plan

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
class Lifetimes:
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
    forwarding: "Forwarding"  # who may write into what
    # per step whose temporary is a body's (`OpInfo.temp_parts`): the allocations it is made of
    transient_parts: dict


def lifetimes(analysis: Analysis, plan: Plan | None = None) -> Lifetimes:
    ordered = plan is not None and plan.order is not None
    key = CacheKey(Fact.ORDERED_LIFETIMES if ordered else Fact.LIFETIMES, analysis.kernels)
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
    last = np.maximum(first, group_max(root_of, tensor_last, count)[roots])
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
    held, per_op = kernel_holds(analysis)
    side_by_side = np.zeros(steps + 1, dtype=np.int64)
    transient_parts = {}
    for index, size in enumerate(per_op):
        if size and size > transient[step_of[index]]:
            transient[step_of[index]] = size
            parts = ops[index].temp_parts if size == ops[index].temp_bytes else ()
            transient_parts[int(step_of[index])] = parts
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
    result = Lifetimes(
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
        transient_parts,
    )
    analysis.cache[key] = result
    return result


class KernelHolds(NamedTuple):
    temporaries: Temporaries  # the kernel set's (`lms.graph.kernels.temporaries`)
    per_op: list  # per op, the bytes it holds while it runs: that or a called body's own peak


def kernel_holds(analysis: Analysis) -> KernelHolds:
    """The kernel set's temporaries (`lms.graph.kernels.temporaries`) and, per op, the bytes it
    holds
    while it runs (that or a called body's own peak): computed once per analysis and kernels."""
    key = CacheKey(Fact.TEMPORARIES, analysis.kernels)
    if key not in analysis.cache:
        held = temporaries(analysis, analysis.kernels)
        per_op = [max(op.temp_bytes, held.bytes[i]) for i, op in enumerate(analysis.ops)]
        analysis.cache[key] = KernelHolds(held, per_op)
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
    return max(footprints(analysis), key=lambda f: f.bytes, default=Footprint("", 0, 0))


def footprints(analysis: Analysis) -> list[Footprint]:
    """Every running op's own device bytes, as `largest_footprint` counts them, in op order
    (what splitting ranks its candidates by: lms/split/fit.py)."""
    key = CacheKey(Fact.FOOTPRINT, analysis.kernels)
    if key in analysis.cache:
        return analysis.cache[key]
    tensors, ops = analysis.tensors, analysis.ops
    _, held = kernel_holds(analysis)
    found = []
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
        found.append(Footprint(op.name, own + held[index], held[index]))
    analysis.cache[key] = found
    return found


class Forwarding(NamedTuple):
    """Forwarding ops' candidate inputs as parallel arrays (positions in the lifetime arrays)."""

    step: np.ndarray  # the op's step
    out: np.ndarray  # its output's buffer
    source: np.ndarray  # the input's buffer it may write into


class Forwarded(NamedTuple):
    """The outputs written into an input's buffer, as parallel arrays."""

    outputs: np.ndarray  # the output buffers' positions in the lifetime arrays
    at: np.ndarray  # their steps
    sources: np.ndarray  # the allocations they take over (buffers, then swap-in copies)


def _forwarding_candidates(analysis, step_of, index, sizes, output_roots) -> Forwarding:
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
        return Forwarding(empty, empty, empty)
    array = np.array(rows, dtype=np.int64)
    return Forwarding(array[:, 0], array[:, 1], array[:, 2])


def forwarded(
    analysis: Analysis, static: Lifetimes, last: np.ndarray, copies=(), step_of=None
) -> Forwarded:
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
            if k is None or k in taken or static.sizes[k] != analysis.buffer_bytes(tensor):
                continue
            taken.add(k)
            more.append((k, finish, len(static.sizes) + position))
    if more:
        extra = np.array(more, dtype=np.int64)
        chosen = np.concatenate([chosen, extra[:, 0]])
        at = np.concatenate([at, extra[:, 1]])
        sources = np.concatenate([sources, extra[:, 2]])
    return Forwarded(chosen, at, sources)


def group_max(groups: np.ndarray, values: np.ndarray, count: int) -> np.ndarray:
    result = np.full(count, -1, dtype=np.int64)
    np.maximum.at(result, groups, values)
    return result
