"""Analyse a traced training step (`lms.internal.analyze`): its graph as the planner and
simulator see it (lms/graph/reader.py, lms/graph/step.py), with what each function call, While
loop or If holds while it runs, which is its body's own simulated peak. Sits above the
simulator for that reason: the graph reader below it needs no simulation.
"""

import math

import numpy as np

from lms import _tf_private
from lms.graph.loops import IF_OPS, WHILE_OPS, body_graph, called_function, called_name
from lms.graph.names import BODY_TEMPS
from lms.graph.reader import read_graph
from lms.graph.step import ONEDNN_PAIRED_READS, Analysis, collector_paused
from lms.memory.lifetimes import lifetimes
from lms.memory.simulator import buffers, simulate

# Ops that run another function's body: its own buffers are the call's temporaries.
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
GROUPED_FILTER_GRADIENTS = frozenset({"Conv2DBackpropFilter", "Conv3DBackpropFilterV2"})


def analyze(
    graph,
    batch_size: int | None = None,
    variables=None,
    trainable_variables=None,
    host_device_marker: str | None = None,
    quiet: bool = False,
    paired_reads=frozenset(),
    kernels: str | None = None,
) -> Analysis:
    """Analyse `graph` (a FuncGraph). `variables` default to the graph's captured variables.

    `host_device_marker`: ops whose device string contains it (e.g. "CPU" when computing on a GPU)
    are on the host: their tensors are never swapped.
    `paired_reads`: (op type, input position) reads a swap-in must not feed (the tensor is then
    not swapped); `cpu_paired_reads()` gives those of this TensorFlow's CPU kernels.
    `kernels`: whose temporaries the simulator counts (`Analysis.kernels`), in the loops' and
    calls' bodies too (a split op's loop of pieces holds a piece's convolution workspace).
    """
    with collector_paused():
        analysis = read_graph(
            graph,
            batch_size,
            variables,
            trainable_variables,
            host_device_marker,
            quiet,
            paired_reads,
        )
        analysis.kernels = kernels or analysis.kernels
        inner = (batch_size, analysis.kernels, paired_reads)
        for op, info in zip(graph.get_operations(), analysis.ops, strict=True):
            if not info.runs:  # TensorFlow prunes it: it holds nothing
                continue
            if op.type in CALL_OPS:
                on_cpu = host_device_marker is None
                info.temp_bytes = _call_temp_bytes(graph, op, inner, on_cpu)
            elif op.type in WHILE_OPS | IF_OPS:
                info.temp_bytes, info.temp_parts = _branch_temp_bytes(graph, op, inner)
    return analysis


def cpu_paired_reads() -> frozenset:
    """The reads a swap-in must not feed when the step runs on this TensorFlow's CPU: oneDNN's
    (ONEDNN_PAIRED_READS) when oneDNN is on (TF_ENABLE_ONEDNN_OPTS), none otherwise."""
    return ONEDNN_PAIRED_READS if _tf_private.onednn_enabled() else frozenset()


def _body_temp_bytes(body, inner: tuple) -> tuple[int, tuple]:
    """What a function body holds while it runs besides its inputs and outputs (`inner`: the
    batch size, kernels and paired reads it is analysed with), and the allocations that is at
    its peak (a loop of split pieces holds a piece's buffers, not one block: placed as one,
    the allocator's model found no room for it and the 3D U-Net 144³'s plans missed their
    budget by 50 MiB of padding where the pieces made one by one fit)."""
    batch_size, kernels, paired = inner
    inner = analyze(
        body,
        batch_size,
        variables=[],
        trainable_variables=[],
        quiet=True,
        paired_reads=paired,
        kernels=kernels,
    )
    held = inner.input_bytes + sum(inner.tensors[t].bytes for t in inner.outputs)
    simulation = simulate(inner)
    temp = max(0, simulation.peak_bytes - held)
    return temp, _parts(inner, simulation.peak_step, temp)


def _parts(analysis, step: int, temp: int) -> tuple:
    """The allocations alive at `step` that are not the body's outputs, in the order the body
    allocates them, cut or topped up to `temp` bytes."""
    allocations = buffers(analysis)
    static = lifetimes(analysis)
    alive = (allocations.first <= step) & (step <= allocations.last) & (allocations.sizes > 0)
    kept, total = [], 0
    for k in sorted(np.flatnonzero(alive), key=lambda k: (allocations.first[k], k)):
        if k < allocations.outputs and int(static.roots[k]) in static.output_roots:
            continue
        if total + int(allocations.sizes[k]) <= temp:
            kept.append(int(allocations.sizes[k]))
            total += kept[-1]
    if temp > total:
        kept.append(temp - total)
    return tuple(kept)


def _branch_temp_bytes(graph, op, inner: tuple) -> tuple[int, tuple]:
    """A While's body per iteration, or an If's larger branch: held while the op runs. What a
    loop keeps across iterations for its gradient is in its outputs (lms/graph/loops.py)."""
    names = ("body",) if op.type in WHILE_OPS else ("then_branch", "else_branch")
    known = getattr(graph, BODY_TEMPS, None)
    if known is None:
        known = {}
        setattr(graph, BODY_TEMPS, known)
    held = []
    for name in names:
        function = called_name(op, name)
        if function is None:
            continue
        key = (function, *inner)
        if key not in known:
            body = body_graph(graph, op, name)
            known[key] = _body_temp_bytes(body, inner) if body is not None else (0, ())
        held.append(known[key])
    return max(held, default=(0, ()))


def _xla_compiled(call_op, function) -> bool:
    try:
        if call_op.get_attr("_XlaMustCompile"):
            return True
    except ValueError:
        pass
    attribute = function.definition.attr.get("_XlaMustCompile")
    return bool(attribute is not None and attribute.b)


def _call_temp_bytes(graph, call_op, inner: tuple, on_cpu: bool) -> int:
    """What a function call holds while it runs, besides its inputs and outputs: its body's
    simulated peak less those, plus XLA's expansion of grouped-convolution filter gradients.

    Keras 3 runs grouped convolutions (ConvNeXt's 7x7 depthwise ones) as `jit_compile` functions.
    XLA on the CPU computes their filter gradient as a dense convolution over an expanded
    filter: one temporary of 2 x kh x kw x C_in x C_out elements (measured: 220.5 MiB per call
    for ConvNeXtTiny's 768-channel blocks, 26 % of the step's peak; the allocator shows it under
    no op name). GPUs run grouped convolutions natively (cuDNN): no expansion there.
    """
    function = called_function(graph, call_op)
    body = getattr(function, "graph", None)
    if body is None:
        return 0
    temp, _ = _body_temp_bytes(body, inner)
    if on_cpu and _xla_compiled(call_op, function):
        for op in body.get_operations():
            if op.type not in GROUPED_FILTER_GRADIENTS or not op.inputs[0].shape.rank:
                continue
            filter_shape = op.outputs[0].shape
            in_channels = op.inputs[0].shape[-1]
            if not filter_shape.is_fully_defined() or in_channels is None:
                continue
            *window, group_channels, out_channels = filter_shape.as_list()
            if group_channels and in_channels > group_channels:
                expanded = math.prod(window) * in_channels * out_channels
                temp += 2 * expanded * op.outputs[0].dtype.size
    return temp
