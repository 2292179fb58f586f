"""A step's per-op times on a GPU that is not here: a roofline estimate from the rewritten graph,
laid out as a `StepProfile` the step-time model replays on a link (lms/timing/steptime.py).

Each op takes `launch + max(FLOPs / FLOP/s, bytes / memory bandwidth)` on one compute stream, in
a topological order of the graph (ops in the order the step was written, each swap-in's copy right
before its reader). FLOPs come from TensorFlow's own op statistics (`RegisterStatistics("flops")`,
what tf.compat.v1.profiler counts), with the depthwise gradients it lacks computed here; bytes are
the op's inputs and outputs. Ops that move no data (constants, reads of variables, shapes,
identities) cost nothing. This is an estimate: cuDNN's choice of algorithm, fusion and the
executor's overheads are not modelled; `RooflineDevice.flops` holds sustained rates (see
ROOFLINE_GPUS) and benchmarks/link_projection.py measures the model where it can be measured
(the emulated device).
"""

import heapq
import math
from dataclasses import dataclass

from lms.graph.names import transfer_kind
from lms.timing.profile import OpEvent, StepProfile


@dataclass(frozen=True)
class RooflineDevice:
    """A GPU for the roofline: sustained FLOP/s per dtype and memory bytes per second."""

    name: str
    flops: dict  # dtype name -> FLOP/s sustained by convolutions and matrix products
    memory_bandwidth: float
    launch: float = 5e-6  # seconds per kernel

    def op_seconds(self, flops: float, nbytes: float, dtype: str) -> float:
        rate = self.flops.get(dtype, self.flops["float32"])
        return self.launch + max(flops / rate, nbytes / self.memory_bandwidth)


# Sustained rates: 60 % of the datasheet's peak FLOP/s (fp16: of the tensor cores' dense peak,
# 40 %) and 80 % of its memory bandwidth, what cuDNN's convolutions reach on large layers.
ROOFLINE_GPUS = {
    "v100": RooflineDevice(
        "V100 SXM2", {"float32": 0.6 * 15.7e12, "float16": 0.4 * 125e12}, 0.8 * 900e9
    ),
    "a100": RooflineDevice(
        "A100 SXM4",
        {"float32": 0.6 * 19.5e12, "float16": 0.4 * 312e12, "bfloat16": 0.4 * 312e12},
        0.8 * 1555e9,
    ),
    "h100": RooflineDevice(
        "H100 SXM5",
        {"float32": 0.6 * 67e12, "float16": 0.4 * 989e12, "bfloat16": 0.4 * 989e12},
        0.8 * 3350e9,
    ),
}
# ops that move no data on a GPU (metadata, variable handles, aliases) or that the host store
# adds only on the emulated device (its copies into the allocator)
FREE_OPS = frozenset(
    {
        "Const",
        "Placeholder",
        "Identity",
        "IdentityN",
        "NoOp",
        "ReadVariableOp",
        "VarHandleOp",
        "Shape",
        "ShapeN",
        "Reshape",
        "Squeeze",
        "ExpandDims",
        "StopGradient",
        "EnsureShape",
        "DeepCopy",
    }
)
DEPTHWISE_GRADIENTS = ("DepthwiseConv2dNativeBackpropInput", "DepthwiseConv2dNativeBackpropFilter")


def _elements(tensor, batch_size) -> int:
    dims = tensor.shape.as_list() if tensor.shape.rank is not None else []
    return math.prod((batch_size or 1) if d is None else d for d in dims)


def _flops(graph, op, batch_size) -> float:
    from tensorflow.python.framework import ops as tf_ops

    if op.type in DEPTHWISE_GRADIENTS:
        # as many multiply-adds as the forward op: the output gradient times the filter's window
        filter_shape = op.inputs[1] if op.type.endswith("Input") else op.outputs[0]
        window = math.prod(filter_shape.shape.as_list()[:2]) if filter_shape.shape.rank else 1
        return 2.0 * _elements(op.inputs[2], batch_size) * window
    try:
        value = tf_ops.get_stats_for_node_def(graph, op.node_def, "flops").value
    except (ValueError, TypeError):  # shapes unknown to the statistic
        value = None
    if value is None:  # elementwise and the rest: about one operation per output element
        value = sum(_elements(t, batch_size) for t in op.outputs)
    return float(value)


def _priorities(ops, index) -> dict:
    """Where each op goes among those ready: the order written, a swap's copy ops right before
    their first reader, and transfers as soon as they can."""
    readers = {}
    for op in ops:
        for source in {t.op.name for t in op.inputs} | {c.name for c in op.control_inputs}:
            readers.setdefault(source, []).append(index[op.name])
    priority = {}
    for op in ops:
        if transfer_kind(op.name):
            priority[op.name] = -1.0
        elif "/lms_swapin_" in op.name or op.name.endswith("lms_readers"):
            priority[op.name] = min(readers.get(op.name, [index[op.name]])) - 0.5
        else:
            priority[op.name] = float(index[op.name])
    return priority


def roofline_profile(graph, device: RooflineDevice, batch_size: int | None = None) -> StepProfile:
    """The rewritten step `graph` on `device`, compute only: one op at a time, transfers taking
    no time (the step-time model adds the link)."""
    ops = graph.get_operations()
    index = {op.name: i for i, op in enumerate(ops)}
    inputs = {
        op.name: {t.op.name for t in op.inputs} | {c.name for c in op.control_inputs} for op in ops
    }
    waiting = {name: len(sources) for name, sources in inputs.items()}
    readers = {}
    for name, sources in inputs.items():
        for source in sources:
            readers.setdefault(source, []).append(name)
    priority = _priorities(ops, index)
    by_name = {op.name: op for op in ops}
    ready = [(priority[n], n) for n, count in waiting.items() if count == 0]
    heapq.heapify(ready)
    clock, ends, events = 0.0, {}, []
    while ready:
        _, name = heapq.heappop(ready)
        op = by_name[name]
        if transfer_kind(name):  # asked for as soon as its inputs are done
            start = max((ends[s] for s in inputs[name]), default=0.0)
            duration = 0.0
        else:
            start = clock
            duration = 0.0
            if op.type not in FREE_OPS and "/lms_swapin_" not in name:
                nbytes = sum(
                    _elements(t, batch_size) * t.dtype.size
                    for t in (*op.inputs, *op.outputs)
                    if t.dtype.is_numpy_compatible
                )
                dtype = op.outputs[0].dtype.name if op.outputs else "float32"
                duration = device.op_seconds(_flops(graph, op, batch_size), nbytes, dtype)
            clock = start + duration
        ends[name] = start + duration
        events.append(OpEvent(name, op.type, start, duration))
        for reader in readers.get(name, ()):
            waiting[reader] -= 1
            if waiting[reader] == 0:
                heapq.heappush(ready, (priority[reader], reader))
    events.sort(key=lambda e: e.start)
    return StepProfile(tuple(events), ())
