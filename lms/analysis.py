"""Analyse a traced training step: ops, tensor sizes, buffers, categorized topological levels.

Works on the step's `FuncGraph` (forward, gradients and optimizer update in one flat graph). Level
k holds every op whose data and control inputs all sit in lower levels (TFLMSv2's categorized
topological sort). Sizes are static: dtype size x shape, an unknown leading dimension taken as the
batch size. Ops that forward their input's buffer (Identity, Reshape, ...) make no new buffer: the
simulator extends the input's lifetime instead.
"""

import logging
import math
from dataclasses import dataclass, field

import tensorflow as tf

from lms import _tf_private
from lms.loops import IF_OPS, WHILE_OPS, body_graph, called_function, list_bytes

log = logging.getLogger("lms")
GiB, MiB = 2**30, 2**20

# Outputs that share input 0's buffer (TensorFlow forwards it) instead of allocating.
ALIAS_OPS = frozenset(
    {
        "Identity",
        "IdentityN",
        "Reshape",
        "ExpandDims",
        "Squeeze",
        "StopGradient",
        "Snapshot",
        "EnsureShape",
        "PreventGradient",
        "Bitcast",
        "CheckNumerics",
    }
)
# Outputs that are not new device buffers of the step: variable reads alias the variable, inputs
# and captures are held by the caller, constants are tiny and made once.
NO_BUFFER_OPS = frozenset({"Const", "ReadVariableOp", "VarHandleOp", "Placeholder", "HostConst"})
# Never swapped (DESIGN.md §2.2): besides the above, shape arithmetic and host-side values.
NEVER_SWAP_OPS = NO_BUFFER_OPS | ALIAS_OPS | frozenset({"Shape", "ShapeN", "Size", "Rank"})
NON_DATA_DTYPES = (tf.resource, tf.variant, tf.string)
# Ops that run another function's body: its own buffers are the call's temporaries.
CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
GROUPED_FILTER_GRADIENTS = frozenset({"Conv2DBackpropFilter", "Conv3DBackpropFilterV2"})
# (op type, input position) reads that oneDNN's CPU kernels need from the forward op itself: a max
# pool's gradient gets the fast kernel only when it reads its max pool's output directly (oneDNN
# then pairs them through a workspace); fed a swap-in it falls back to TensorFlow's own kernel.
# GoogLeNet 224² b4, everything swapped: 230 ms per step in MaxPoolGrad instead of 12 ms (the
# step 1.7x slower than without LMS; 1.1x with these reads kept), and the 3D U-Net's gradients
# differed by tie-breaking. On a GPU no kernel needs this.
ONEDNN_PAIRED_READS = frozenset({("MaxPoolGrad", 1), ("MaxPool3DGrad", 1)})
# Paired, the forward op also outputs oneDNN's workspace (the argmax, one byte per element of
# its output), held until the gradient reads it: GoogLeNet 224² b4's max pools held 27.5 MiB at
# the measured peak for 21.6 MiB of outputs.
WORKSPACE_BYTES_PER_ELEMENT = 1


@dataclass
class TensorInfo:
    name: str
    bytes: int
    producer: int  # op index
    consumers: list = field(default_factory=list)  # [(op index, input position)]
    buffer: int = -1  # index of the tensor whose buffer this one lives in (itself if it allocates)
    swappable: bool = False
    paired_with: str = ""  # the op type whose read keeps it on the device (ONEDNN_PAIRED_READS)


@dataclass
class OpInfo:
    name: str
    type: str
    inputs: list  # tensor indices
    control_inputs: list  # op indices
    outputs: list  # tensor indices
    level: int = 0
    temp_bytes: int = 0  # what the kernel holds besides its inputs and outputs while it runs
    runs: bool = True  # False: TensorFlow prunes it (nothing the step returns or keeps needs it)
    aliases: int = -1  # >= 0: its output is input `aliases` (x * 1, x + 0: see _identity_input)


@dataclass
class Analysis:
    """The step graph as the planner and simulator see it."""

    graph: object
    ops: list
    tensors: list
    levels: list  # level -> [op index]
    outputs: list  # tensor indices the step returns (live to the end)
    resident_bytes: int  # variables (weights, optimizer slots) and the step's inputs
    variable_bytes: int
    trainable_bytes: int
    input_bytes: int
    largest_op: tuple  # (name, bytes of its inputs + outputs)
    unknown_size_tensors: int
    edges: int
    bypassed: list = field(default_factory=list)  # [(op, input position, tensor it reads now)]
    # the kernels the step runs with, whose temporaries the simulator counts (lms/kernels.py):
    # "onednn", "eigen" or "gpu"
    kernels: str = "onednn"
    # While loops and what their tensor lists keep for the gradient (lms/loops.py), which LMS
    # cannot swap: [(op name, bytes)], largest first
    loops: list = field(default_factory=list)
    cache: dict = field(default_factory=dict, repr=False)  # plan-independent facts, computed once

    def summary(self) -> dict:
        return {
            "vertices": len(self.ops),
            "edges": self.edges,
            "levels": len(self.levels),
            "learning_parameter_bytes": self.trainable_bytes,
            "variable_bytes": self.variable_bytes,
            "input_bytes": self.input_bytes,
            "largest_op": {"name": self.largest_op[0], "bytes": self.largest_op[1]},
            "unknown_size_tensors": self.unknown_size_tensors,
            "kernels": self.kernels,  # whose convolution temporaries were counted
            "loops": [{"name": name, "bytes": size} for name, size in self.loops],
        }


def tensor_bytes(tensor, batch_size: int | None) -> int | None:
    """Static size of a tensor in bytes, or None when its shape is not known."""
    if tensor.dtype in NON_DATA_DTYPES:
        return 0
    shape = tensor.shape
    if shape.rank is None:
        return None
    dims = list(shape.as_list())
    if dims and dims[0] is None and batch_size:
        dims[0] = batch_size
    if any(d is None for d in dims):
        return None
    return math.prod(dims) * tensor.dtype.size


def _variable_bytes(variables) -> int:
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


def _bypass_identity_n(ops, tensors, graph_outputs: set, kept: set) -> list:
    """Let the readers of an IdentityN's output k read its input k (what Grappler's dependency
    optimizer does before the step runs; the rewrite does it in the graph too).

    Keras 3's optimizer passes every gradient through one IdentityN: read as written, no
    variable update could run before the last gradient exists, and an enforced order
    (lms/ordering.py) would have to hold all gradients until then. Only IdentityN ops without
    control inputs, not returned and not kept as control outputs, are bypassed.
    """
    moved = []
    for op in ops:
        if op.type != "IdentityN" or op.control_inputs or op.name in kept:
            continue
        if len(op.inputs) != len(op.outputs) or graph_outputs.intersection(op.outputs):
            continue
        for source, output in zip(op.inputs, op.outputs, strict=True):
            for consumer, position in tensors[output].consumers:
                ops[consumer].inputs[position] = source
                tensors[source].consumers.append((consumer, position))
                moved.append((consumer, position, source))
            tensors[output].consumers = []
    return moved


def _drop_dead_reads(ops, tensors, graph_outputs: set) -> None:
    """Forget reads that never happen: input k of an IdentityN whose output k nothing reads.

    A `tf.custom_gradient` forward op is IdentityN(y, x, ...) of which only y is used; Grappler
    prunes the unread inputs, so such a "reader" of x never runs. Planning a swap-in for it would
    strand the swapped-out copy on the host (it is freed after its last swap-in runs), and
    simulating it would keep x alive on the device for nothing.
    """
    changed = True
    while changed:  # an IdentityN may feed another one
        changed = False
        for i, op in enumerate(ops):
            if op.type != "IdentityN":
                continue
            for position, (source, output) in enumerate(zip(op.inputs, op.outputs, strict=True)):
                read = (i, position)
                dead = not tensors[output].consumers and output not in graph_outputs
                if dead and read in tensors[source].consumers:
                    tensors[source].consumers.remove(read)
                    changed = True


def _identity_input(op) -> int:
    """The input position whose value `op` returns unchanged, or -1: x * 1, 1 * x, x + 0, 0 + x
    and x - 0 with a constant 1 or 0 that does not broadcast x. Grappler's constant folding
    replaces such ops by a Snapshot of x, which forwards x's buffer instead of allocating.

    `tf.nn.silu`'s gradient computes `beta * features` with a constant beta of 1: in
    EfficientNetB0 224² b4 these products held 95 MiB at the simulated peak, none at the measured.
    """
    neutral = {"Mul": 1, "AddV2": 0, "Add": 0, "Sub": 0}.get(op.type)
    if neutral is None or len(op.inputs) != 2 or not op.outputs[0].shape.is_fully_defined():
        return -1
    for position, constant in enumerate(op.inputs):
        other = op.inputs[1 - position]
        if constant.op.type != "Const" or (op.type == "Sub" and position == 0):
            continue
        if other.shape != op.outputs[0].shape or other.dtype != op.outputs[0].dtype:
            continue
        value = constant.op.get_attr("value")
        if value.tensor_shape.dim and math.prod(d.size for d in value.tensor_shape.dim) > 1:
            continue  # only scalars and one-element tensors (the common case; cheap to read)
        number = tf.make_ndarray(value)
        if number.size == 1 and number.item() == neutral:
            return 1 - position
    return -1


def _mark_pruned(ops, tensors, graph_outputs, kept: set) -> None:
    """Mark the ops TensorFlow prunes before running a function: those neither the step's
    outputs nor its control outputs (variable updates and other stateful ops) depend on. Their
    outputs are never allocated and their reads never happen.

    E.g. `tf.nn.silu`'s custom gradient computes a gradient for its constant `beta` (a chain of
    Mul, Square, Sub and Sum over the activation) that nothing reads: in EfficientNetB0 224² b4,
    1,362 pruned ops with 569 MiB of outputs, simulated as if they ran (+48 % on the plain peak).
    """
    runs = [False] * len(ops)
    stack = [tensors[t].producer for t in graph_outputs]
    stack += [i for i, op in enumerate(ops) if op.name in kept]
    while stack:
        index = stack.pop()
        if runs[index]:
            continue
        runs[index] = True
        stack.extend(tensors[t].producer for t in ops[index].inputs)
        stack.extend(ops[index].control_inputs)
    for index, op in enumerate(ops):
        if runs[index]:
            continue
        op.runs, op.temp_bytes = False, 0
        for position, t in enumerate(op.inputs):
            if (index, position) in tensors[t].consumers:
                tensors[t].consumers.remove((index, position))
        for t in op.outputs:
            tensors[t].bytes = 0


def analyze(
    graph,
    batch_size: int | None = None,
    variables=None,
    trainable_variables=None,
    host_device_marker: str | None = None,
    quiet: bool = False,
    paired_reads=frozenset(),
) -> Analysis:
    """Analyse `graph` (a FuncGraph). `variables` default to the graph's captured variables.

    `host_device_marker`: ops whose device string contains it (e.g. "CPU" when computing on a GPU)
    are on the host: their tensors are never swapped.
    `paired_reads`: (op type, input position) reads a swap-in must not feed (the tensor is then
    not swapped); `cpu_paired_reads()` gives those of this TensorFlow's CPU kernels.
    """
    tf_ops = graph.get_operations()
    op_index = {op: i for i, op in enumerate(tf_ops)}
    tensor_index, tensors, ops, edges, unknown, loops = {}, [], [], 0, 0, {}
    ranks, itemsizes, devices = [], [], [op.device for op in tf_ops]
    for i, op in enumerate(tf_ops):
        outputs = []
        for tensor in op.outputs:
            size = tensor_bytes(tensor, batch_size)
            if size is None:
                unknown += 1
                size = 0
            tensor_index[tensor.ref()] = len(tensors)
            outputs.append(len(tensors))
            tensors.append(TensorInfo(tensor.name, size, i, buffer=len(tensors)))
            ranks.append(tensor.shape.rank or 0)
            itemsizes.append(max(tensor.dtype.size, 1))
        ops.append(OpInfo(op.name, op.type, [], [op_index[c] for c in op.control_inputs], outputs))
        if op.type in CALL_OPS:
            ops[-1].temp_bytes = _call_temp_bytes(graph, op, batch_size, host_device_marker is None)
        elif op.type in WHILE_OPS | IF_OPS:
            ops[-1].temp_bytes = _branch_temp_bytes(graph, op, batch_size)
            for k, size in list_bytes(graph, op, lambda t: tensor_bytes(t, batch_size)).items():
                tensors[outputs[k]].bytes = size  # a variant: never swapped (rank 0)
                loops[i] = loops.get(i, 0) + size
    for i, op in enumerate(tf_ops):
        inputs = ops[i].inputs
        for position, tensor in enumerate(op.inputs):
            t = tensor_index[tensor.ref()]
            inputs.append(t)
            tensors[t].consumers.append((i, position))
        edges += len(inputs) + len(ops[i].control_inputs)
        ops[i].aliases = _identity_input(op)
    outputs = [tensor_index[t.ref()] for t in graph.outputs if t.ref() in tensor_index]
    kept = {op.name for op in getattr(graph, "control_outputs", None) or []}
    bypassed = _bypass_identity_n(ops, tensors, set(outputs), kept)
    _drop_dead_reads(ops, tensors, set(outputs))
    if hasattr(graph, "control_outputs"):  # a function graph: TensorFlow prunes what is unused
        _mark_pruned(ops, tensors, outputs, kept)

    _assign_levels(ops, tensors)
    levels = [[] for _ in range(1 + max((op.level for op in ops), default=-1))]
    for i, op in enumerate(ops):
        levels[op.level].append(i)

    for info, rank, itemsize in zip(tensors, ranks, itemsizes, strict=True):
        op = ops[info.producer]
        if op.type in NO_BUFFER_OPS and op.type != "Placeholder":
            info.bytes = 0
        on_host = host_device_marker is not None and host_device_marker in devices[info.producer]
        info.swappable = (
            op.type not in NEVER_SWAP_OPS and info.bytes > 0 and not on_host and rank >= 2
        )
        for consumer, position in info.consumers if paired_reads else ():
            if (ops[consumer].type, position) in paired_reads and not info.paired_with:
                info.swappable, info.paired_with = False, ops[consumer].type
                # the workspace lives as long as the output (both read by the gradient)
                info.bytes += info.bytes // itemsize * WORKSPACE_BYTES_PER_ELEMENT
    _fix_alias_buffers(ops, tensors)

    input_bytes = sum(
        tensors[t].bytes
        for i in range(len(ops))
        if ops[i].type == "Placeholder"
        for t in ops[i].outputs
    )
    if variables is None:
        variables = list(getattr(graph, "variables", []))
    if trainable_variables is None:
        trainable_variables = list(getattr(graph, "trainable_variables", variables))
    variable_bytes = _variable_bytes(variables)
    largest = ("", 0)
    for op in ops:
        if op.type in ALIAS_OPS:  # allocates nothing, runs no kernel (IdentityN of all gradients)
            continue
        size = sum(tensors[t].bytes for t in op.inputs) + sum(tensors[t].bytes for t in op.outputs)
        if size > largest[1]:
            largest = (op.name, size)
    analysis = Analysis(
        graph,
        ops,
        tensors,
        levels,
        outputs,
        variable_bytes + input_bytes,
        variable_bytes,
        _variable_bytes(trainable_variables),
        input_bytes,
        largest,
        unknown,
        edges,
        bypassed,
        # loops whose tensor lists hold memory for the gradient: [(op name, bytes)], largest first
        loops=sorted(
            ((ops[i].name, size) for i, size in loops.items() if ops[i].runs),
            key=lambda loop: -loop[1],
        ),
    )
    if quiet:
        return analysis
    log.info("The graph has %d vertices and %d edges", len(ops), edges)
    log.info("The graph has %.2f MiB of learning parameters", analysis.trainable_bytes / MiB)
    log.info("The largest operation is %s consuming %.3f GiB", largest[0], largest[1] / GiB)
    log.info("The graph has %d levels", len(levels))
    if unknown:
        log.info("%d tensors have no static size and count as 0 bytes", unknown)
    return analysis


def cpu_paired_reads() -> frozenset:
    """The reads a swap-in must not feed when the step runs on this TensorFlow's CPU: oneDNN's
    (ONEDNN_PAIRED_READS) when oneDNN is on (TF_ENABLE_ONEDNN_OPTS), none otherwise."""
    return ONEDNN_PAIRED_READS if _tf_private.onednn_enabled() else frozenset()


def dependencies(ops: list, tensors: list) -> tuple[list, list]:
    """Per op: how many distinct ops it waits for (data and control), and the ops waiting for
    it, in creation order."""
    pending = [0] * len(ops)
    successors = [[] for _ in ops]
    for i, op in enumerate(ops):
        preds = {tensors[t].producer for t in op.inputs} | set(op.control_inputs)
        pending[i] = len(preds)
        for p in preds:
            successors[p].append(i)
    return pending, successors


def _assign_levels(ops: list, tensors: list) -> None:
    """Categorized topological sort (Kahn's algorithm, one level per wave)."""
    pending, successors = dependencies(ops, tensors)
    wave = [i for i, n in enumerate(pending) if n == 0]
    level = 0
    while wave:
        following = []
        for i in wave:
            ops[i].level = level
            for s in successors[i]:
                pending[s] -= 1
                if pending[s] == 0:
                    following.append(s)
        wave, level = following, level + 1


def _fix_alias_buffers(ops: list, tensors: list) -> None:
    """Point alias outputs at their root buffer, in level order (creation order need not be
    topological, so a chain of aliases resolves only this way)."""
    for index in sorted(range(len(ops)), key=lambda i: ops[i].level):
        op = ops[index]
        if op.aliases >= 0:
            source = op.inputs[op.aliases]
            output = tensors[op.outputs[0]]
            output.buffer, output.bytes = tensors[tensors[source].buffer].buffer, 0
            output.swappable = False  # as an Identity's: the root buffer is what swaps
        elif op.type in ALIAS_OPS and op.inputs:
            # IdentityN: output k is input k; the others have one data input (the first)
            per_output = len(op.outputs) == len(op.inputs)
            for k, t in enumerate(op.outputs):
                source = op.inputs[k] if per_output else op.inputs[0]
                tensors[t].buffer = tensors[tensors[source].buffer].buffer
                tensors[t].bytes = 0  # the bytes belong to the root buffer


def _body_temp_bytes(body, batch_size) -> int:
    """What a function body holds while it runs besides its inputs and outputs."""
    from lms.simulator import simulate  # the simulator imports this module

    inner = analyze(body, batch_size, variables=[], trainable_variables=[], quiet=True)
    held = inner.input_bytes + sum(inner.tensors[t].bytes for t in inner.outputs)
    return max(0, simulate(inner).peak_bytes - held)


def _branch_temp_bytes(graph, op, batch_size) -> int:
    """A While's body per iteration, or an If's larger branch: held while the op runs. What a
    loop keeps across iterations for its gradient is in its outputs (lms/loops.py)."""
    names = ("body",) if op.type in WHILE_OPS else ("then_branch", "else_branch")
    bodies = [body_graph(graph, op, name) for name in names]
    return max((_body_temp_bytes(b, batch_size) for b in bodies if b is not None), default=0)


def _xla_compiled(call_op, function) -> bool:
    try:
        if call_op.get_attr("_XlaMustCompile"):
            return True
    except ValueError:
        pass
    attribute = function.definition.attr.get("_XlaMustCompile")
    return bool(attribute is not None and attribute.b)


def _call_temp_bytes(graph, call_op, batch_size, on_cpu: bool) -> int:
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
    temp = _body_temp_bytes(body, batch_size)
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
