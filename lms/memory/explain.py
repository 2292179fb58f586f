"""Why a simulated peak is what it is: what holds device memory at the peak step, and why each
large buffer there was not swapped out (issue: a user must see what limits reach).

The peak decomposes into: variables and inputs (resident), buffers alive at the step, copies
swapped back in, the running kernel's temporaries, the next op's outputs (allocated while this
one runs) and, when simulated with the allocator's placement, its chunks' padding.
Each buffer gets one reason: the running op reads or writes it, it is a step output,
its op type or shape is never swapped, its readers are too close (within `swapout_threshold`
levels), no op runs between its producer and reader to trigger a swap-in, or it was swapped and
is still read by a near reader.
"""

import numpy as np

from lms.graph.step import NEVER_SWAP_OPS, Analysis
from lms.memory.lifetimes import lifetimes
from lms.memory.schedule import schedule
from lms.memory.simulator import Simulation, placement
from lms.planning.planner import Plan, coordinates, find_trigger


def _reason(analysis, plan: Plan | None, tensor: int, running: int, swapped, outputs) -> str:
    info = analysis.tensors[tensor]
    producer = analysis.ops[info.producer]
    if info.producer == running:
        return "written by the running op"
    if any(c == running for c, _ in info.consumers):
        return "read by the running op"
    if tensor in swapped:
        return "swapped out, but still read by a reader within swapout_threshold"
    if tensor in outputs:
        return "a step output: lives to the end of the step"
    if not info.swappable:
        if info.paired_with:
            return (
                f"unswappable: read by {info.paired_with}, which the CPU's oneDNN kernel pairs "
                "with its forward op (a swap-in would make it fall back to a slow kernel)"
            )
        if producer.type in NEVER_SWAP_OPS:
            return f"unswappable: {producer.type} outputs are never swapped"
        return "unswappable: scalars, vectors and host tensors are never swapped"
    if plan is None:
        return "LMS not used: the plan without swaps fits"
    unit = "ops" if plan.order is not None else "levels"
    where = coordinates(analysis, plan.order is not None)
    distance = max((int(where[c] - where[info.producer]) for c, _ in info.consumers), default=0)
    threshold = plan.parameters.swapout_threshold
    if distance <= threshold:
        return f"too close: last reader {distance} {unit} on, swapout_threshold {threshold}"
    last_reader = max(info.consumers, key=lambda c: analysis.ops[c[0]].level)[0]
    if plan.order is None and find_trigger(analysis, last_reader, tensor, 1) is None:
        return "no op runs between its producer and its reader to trigger a swap-in"
    return "not swapped by this plan"


def explain_peak(
    analysis: Analysis, simulation: Simulation, plan: Plan | None = None, top: int = 10
) -> dict:
    """The peak step's memory by part, and its `top` largest buffers with the reason each was not
    swapped out."""
    step_of, steps = schedule(analysis, plan)
    if not steps:
        return {"step": 0, "steps": 0, "buffers": []}
    static = lifetimes(analysis, plan)
    peak = simulation.peak_step
    running = int(np.flatnonzero(step_of == peak)[0])
    last, moved_copies, (outputs, at, _) = placement(analysis, plan)
    copies = [(t, s) for t, begin, finish, s in moved_copies if begin <= peak <= finish]
    swapped = {s.tensor for s in plan.swaps} if plan is not None else set()
    first = static.first.copy()
    first[outputs] = at + 1  # written into an input's buffer, counted as that one until then
    live = np.flatnonzero((first <= peak) & (last >= peak))
    entries = [
        {
            "tensor": analysis.tensors[int(static.roots[k])].name,
            "op_type": analysis.ops[analysis.tensors[int(static.roots[k])].producer].type,
            "bytes": int(static.sizes[k]),
            "why_on_device": _reason(
                analysis, plan, int(static.roots[k]), running, swapped, static.output_roots
            ),
        }
        for k in live
    ]
    for tensor, swap_in in copies:
        reader = analysis.ops[swap_in.consumers[0][0]].name
        entries.append(
            {
                "tensor": analysis.tensors[tensor].name,
                "op_type": "swap-in",
                "bytes": int(analysis.buffer_bytes(tensor)),
                "why_on_device": f"swapped back in for {reader} "
                f"(after {analysis.ops[swap_in.trigger].name})",
            }
        )
    entries.sort(key=lambda e: -e["bytes"])
    serialized = plan is not None and analysis.ops[running].level in plan.serialized_levels
    padding = simulation.padding
    return {
        "step": peak,
        "steps": steps,
        "running_op": analysis.ops[running].name,
        "peak_bytes": int(simulation.peak_bytes),
        "resident_bytes": int(analysis.resident_bytes),
        "buffer_bytes": int(sum(e["bytes"] for e in entries)),
        "kernel_temporary_bytes": int(static.transient[peak]),
        "next_op_in_flight_bytes": 0 if serialized else int(simulation.in_flight[peak]),
        # chunks of TensorFlow's allocator beyond the bytes asked (when simulated with one)
        "allocator_padding_bytes": 0 if padding is None else int(padding[peak]),
        "largest_buffers": entries[:top],
        "other_buffers": {
            "count": max(0, len(entries) - top),
            "bytes": int(sum(e["bytes"] for e in entries[top:])),
        },
    }
