"""Simulate device and host memory over one step, with or without a swap plan (DESIGN.md §2.3).

Execution is modelled one op at a time in topological-level order, with the next op's outputs
allocated while the current op runs (two ops in flight; not within serialized levels). Identity
and IdentityN do not gate their readers (Grappler removes them). A buffer is allocated when its
producer runs and freed after its last reader (aliases included); the step's
outputs live to the end; variables and inputs are resident throughout. With a plan, a swapped
tensor's device buffer lives until its swap-out and its near readers; each swap-in allocates a
copy after its trigger, freed after the group's last reader; the host holds the tensor from the
swap-out to its last swap-in. Unlike TFLMSv2's simulator it counts kernel temporaries: a
convolution's kernels (oneDNN on CPUs, cuDNN workspaces on GPUs) hold a buffer about as large as
the op's largest tensor while they run; the largest such temporary of a step is added to it. It
still ignores allocator rounding and element-wise kernels writing into their input's buffer
(modelling that made the error larger, not smaller); `benchmarks/lms_emulated.py` measures the
error left.
"""

from dataclasses import dataclass

import numpy as np

from lms.analysis import Analysis
from lms.planner import Plan

# Op types whose kernels hold a temporary about as large as their largest input or output.
WORKSPACE_OPS = frozenset(
    {
        "Conv2D",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "Conv3D",
        "Conv3DBackpropInputV2",
        "Conv3DBackpropFilterV2",
        "DepthwiseConv2dNative",
        "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
        "_FusedConv2D",
    }
)


@dataclass
class Simulation:
    peak_bytes: int
    peak_step: int
    peak_op: str  # the op running at the peak
    device: np.ndarray  # bytes per step
    host: np.ndarray  # bytes per step
    resident_bytes: int

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


def schedule(analysis: Analysis) -> tuple[np.ndarray, int]:
    """Step index of every op, and the number of steps: one op per step, in execution-level order
    (ties by creation order). GPUs run kernels one stream at a time, and the CPU executor's
    inter-op threads are few; concurrency is added back as the overlap term of `simulate`."""
    levels = execution_levels(analysis)
    order = np.lexsort((np.arange(len(levels)), levels))
    step_of = np.empty(len(levels), dtype=np.int64)
    step_of[order] = np.arange(len(levels))
    analysis.__dict__["_schedule"] = (step_of, len(levels))
    return step_of, len(levels)


def simulate(analysis: Analysis, plan: Plan | None = None) -> Simulation:
    step_of, steps = schedule(analysis)
    end = steps  # exclusive end for "lives to the end of the step"
    device = np.zeros(steps + 1, dtype=np.int64)
    host = np.zeros(steps + 1, dtype=np.int64)
    rerouted = {}  # tensor index -> set of (op, position) no longer reading the original
    swap_out_step = {}
    if plan:
        for swap in plan.swaps:
            rerouted[swap.tensor] = {c for s in swap.swap_ins for c in s.consumers}

    # last reader of every buffer, over all the tensors that live in it
    start = {}
    last = {}
    for t, info in enumerate(analysis.tensors):
        root = info.buffer
        if t == root:
            start[root] = step_of[info.producer]
            last.setdefault(root, step_of[info.producer])
        skip = rerouted.get(t, ())
        for consumer in info.consumers:
            if consumer not in skip:
                last[root] = max(last.get(root, 0), step_of[consumer[0]])
    for t in analysis.outputs:
        last[analysis.tensors[t].buffer] = end - 1
    if plan:
        for swap in plan.swaps:
            info = analysis.tensors[swap.tensor]
            out_step = min(step_of[info.producer] + 1, end - 1)
            swap_out_step[swap.tensor] = out_step
            last[info.buffer] = max(last[info.buffer], out_step)

    for root, first in start.items():
        size = analysis.tensors[root].bytes
        if size and analysis.ops[analysis.tensors[root].producer].type != "Placeholder":
            device[first] += size
            device[last[root] + 1] -= size
    if plan:
        for swap in plan.swaps:
            size = analysis.tensors[swap.tensor].bytes
            host_end = swap_out_step[swap.tensor]
            for swap_in in swap.swap_ins:
                begin = max(step_of[swap_in.trigger] + 1, swap_out_step[swap.tensor] + 1)
                finish = max(step_of[c] for c, _ in swap_in.consumers)
                begin = min(begin, finish)
                device[begin] += size
                device[finish + 1] -= size
                host_end = max(host_end, begin)
            host[swap_out_step[swap.tensor]] += size
            host[host_end + 1] -= size

    allocated = np.zeros(steps + 1, dtype=np.int64)  # new buffers per step, for the overlap
    for root, first in start.items():
        if analysis.ops[analysis.tensors[root].producer].type != "Placeholder":
            allocated[first] += analysis.tensors[root].bytes
    transient = np.zeros(steps + 1, dtype=np.int64)
    for index, op in enumerate(analysis.ops):
        size = op.temp_bytes
        if op.type in WORKSPACE_OPS:
            size = max(size, *(_buffer_bytes(analysis, t) for t in op.inputs + op.outputs))
        if size:
            transient[step_of[index]] = max(transient[step_of[index]], size)
    # Another thread runs the next op meanwhile: its outputs are allocated while this op's inputs
    # are still held. Not within serialized levels, whose ops are chained by control dependencies.
    overlap = np.append(allocated[1:steps], 0) if steps else allocated[:0]
    if plan and plan.serialized_levels and steps:
        chained = [i for lv in plan.serialized_levels for i in analysis.levels[lv]]
        overlap[step_of[chained]] = 0
    device = np.cumsum(device)[:steps] + overlap + transient[:steps] + analysis.resident_bytes
    host = np.cumsum(host)[:steps]
    peak_step = int(np.argmax(device)) if steps else 0
    # one op per step: the op at the peak is the one scheduled there
    peak_op = analysis.ops[int(np.flatnonzero(step_of == peak_step)[0])].name if steps else ""
    peak = int(device[peak_step]) if steps else analysis.resident_bytes
    return Simulation(peak, peak_step, peak_op, device, host, analysis.resident_bytes)


def _buffer_bytes(analysis: Analysis, tensor: int) -> int:
    return analysis.tensors[analysis.tensors[tensor].buffer].bytes
