"""A traced training step as the planner and simulator see it: ops, tensor sizes, buffers,
categorized topological levels.

Works on the step's `FuncGraph` (forward, gradients and optimizer update in one flat graph). Level
k holds every op whose data and control inputs all sit in lower levels (TFLMSv2's categorized
topological sort). Sizes are static: dtype size x shape, an unknown leading dimension taken as the
batch size. Ops that forward their input's buffer (Identity, Reshape, ...) make no new buffer: the
simulator extends the input's lifetime instead.
"""

import contextlib
import enum
import gc
import logging
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import tensorflow as tf

from lms.graph.loops import IF_OPS, WHILE_OPS, list_bytes
from lms.graph.names import HOST_ARRAYS, SPLIT_SCOPE
from lms.graph.passes import bypass_identity_n, drop_dead_reads, identity_input, mark_pruned

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
# The host store's py_funcs (lms/split/ops.py's pieces) return host arrays: not device buffers.
PY_FUNC_OPS = frozenset({"PyFunc", "EagerPyFunc"})
HOST_STORE_SCOPES = (f"{SPLIT_SCOPE}/",)
# Never swapped (docs/lms.md): besides the above, shape arithmetic and host-side values.
NEVER_SWAP_OPS = NO_BUFFER_OPS | ALIAS_OPS | frozenset({"Shape", "ShapeN", "Size", "Rank"})
NON_DATA_DTYPES = (tf.resource, tf.variant, tf.string)
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


class Fact(enum.Enum):
    """What the planner and simulator compute once per analysis, whatever the plan."""

    SCHEDULE = "schedule"
    LIFETIMES = "lifetimes"
    ORDERED_LIFETIMES = "ordered lifetimes"
    TEMPORARIES = "temporaries"
    FOOTPRINT = "footprint"
    ANCESTORS = "ancestors"
    LEVELS = "levels"
    DEPTH_FIRST = "depth-first order"
    ORDER_POSITIONS = "order positions"
    FUSION_HELPERS = "fusion helpers"
    ANCHORS = "anchors"
    NEXT_ANCHORS = "next anchors"
    EXECUTED = "executed"
    HOST_ARRAYS = "host arrays"
    SWAP_OUT_WAITERS = "swap-out waiters"


class CacheKey(NamedTuple):
    """A key of `Analysis.cache`: the fact, and the kernel set for facts that count kernel
    temporaries (None for the others)."""

    fact: Fact
    kernels: str | None = None


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
    # the kernels the step runs with, whose temporaries the simulator counts (lms/graph/kernels.py):
    # "onednn", "eigen" or "gpu"
    kernels: str = "onednn"
    # While loops and what their tensor lists keep for the gradient (lms/graph/loops.py), which LMS
    # cannot swap: [(op name, bytes)], largest first
    loops: list = field(default_factory=list)
    # what the step holds in host memory besides swapped tensors: split ops' host arrays and,
    # computing on a GPU, the host's tensors: [(bytes, [op indices that create, fill or read it])]
    host_arrays: list = field(default_factory=list)
    # plan-independent facts, computed once
    cache: dict[CacheKey, object] = field(default_factory=dict, repr=False)

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


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while a graph is read or a plan tuned. Both allocate
    objects per op, tensor and plan, and each collection that sets off walks every object the
    process tracks: a traced step and its model are hundreds of thousands (DeepLabV3+ 3200² b1,
    17,864 ops: 0.5 of its 1.1 s of analysis, and one or two full collections of 0.3 s each
    during its tuning). What they make holds no cycles to collect; once allocations resume
    after, the collector runs again as it would have."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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


def read_graph(
    graph,
    batch_size: int | None = None,
    variables=None,
    trainable_variables=None,
    host_device_marker: str | None = None,
    quiet: bool = False,
    paired_reads=frozenset(),
) -> Analysis:
    """The ops and tensors of `graph` (a FuncGraph) without what its function calls and loops
    hold while they run (`lms.analyze` adds that). `variables` default to the graph's captured
    variables.

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
        if op.type in WHILE_OPS | IF_OPS:
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
        ops[i].aliases = identity_input(op)
    outputs = [tensor_index[t.ref()] for t in graph.outputs if t.ref() in tensor_index]
    kept = {op.name for op in getattr(graph, "control_outputs", None) or []}
    bypassed = bypass_identity_n(ops, tensors, set(outputs), kept)
    drop_dead_reads(ops, tensors, set(outputs))
    if hasattr(graph, "control_outputs"):  # a function graph: TensorFlow prunes what is unused
        mark_pruned(ops, tensors, outputs, kept)

    _assign_levels(ops, tensors)
    levels = [[] for _ in range(1 + max((op.level for op in ops), default=-1))]
    for i, op in enumerate(ops):
        levels[op.level].append(i)

    held = _host_arrays(graph, tf_ops, ops, tensors)
    copies = _cross_device_copies(ops, tensors, devices, host_device_marker)
    for info, rank, itemsize in zip(tensors, ranks, itemsizes, strict=True):
        op = ops[info.producer]
        on_host = host_device_marker is not None and host_device_marker in devices[info.producer]
        own_buffer = op.type not in NO_BUFFER_OPS | ALIAS_OPS or info.producer in copies
        if on_host and info.bytes and op.runs and own_buffer:
            readers = [c for c, _ in info.consumers if ops[c].runs]
            held.append((info.bytes, [info.producer, *readers]))
        if op.type in NO_BUFFER_OPS and op.type != "Placeholder" or on_host:
            info.bytes = 0  # (a host tensor of a GPU step is not in the GPU's memory)
        elif op.type in PY_FUNC_OPS and op.name.startswith(HOST_STORE_SCOPES):
            info.bytes = 0  # lms's own host copies: numpy arrays, copied in by a DeepCopy
        never = op.type in NEVER_SWAP_OPS and info.producer not in copies  # (a copy: a buffer)
        info.swappable = not never and info.bytes > 0 and not on_host and rank >= 2
        for consumer, position in info.consumers if paired_reads else ():
            if (ops[consumer].type, position) in paired_reads and not info.paired_with:
                info.swappable, info.paired_with = False, ops[consumer].type
                # the workspace lives as long as the output (both read by the gradient)
                info.bytes += info.bytes // itemsize * WORKSPACE_BYTES_PER_ELEMENT
    _fix_alias_buffers(ops, tensors, copies)

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
        host_arrays=held,
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


def _host_arrays(graph, tf_ops, ops, tensors) -> list:
    """The split ops' host arrays (HOST_ARRAYS) that the step runs: (bytes, the ops that
    create or fill each, and the readers of its handles)."""
    arrays = getattr(graph, HOST_ARRAYS, None)
    if not arrays:
        return []
    index = {op.name: i for i, op in enumerate(tf_ops)}
    found = []
    for size, names in arrays.values():
        fillers = [index[n] for n in names if n in index and ops[index[n]].runs]
        if not fillers or fillers[0] != index.get(names[0]):  # its creator never runs
            continue
        members = set(fillers)
        for i in fillers:
            members.update(c for t in ops[i].outputs for c, _ in tensors[t].consumers)
        found.append((size, sorted(i for i in members if ops[i].runs)))
    return found


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


def _cross_device_copies(ops: list, tensors: list, devices: list, marker) -> set:
    """Identities whose input is on the other side of the host/device line: TensorFlow copies
    the tensor across on that edge (lms.split.ops.DevicePieces: a split op's input kept on the host,
    a piece read to the device, a piece stored back), so the Identity's output is a buffer of its
    own, not an alias: a device copy counts on the device and can be swapped like any (as the
    emulated device's DeepCopy of an assembled output is); a host copy counts on the host, and
    the device tensor it copied is freed after it, not kept alive as its alias."""
    if marker is None:
        return set()
    found = set()
    for index, op in enumerate(ops):
        if op.type == "Identity" and op.inputs:
            source = devices[tensors[op.inputs[0]].producer]
            if (marker in devices[index]) != (marker in source):
                found.add(index)
    return found


def _fix_alias_buffers(ops: list, tensors: list, copies=frozenset()) -> None:
    """Point alias outputs at their root buffer, in level order (creation order need not be
    topological, so a chain of aliases resolves only this way). `copies` are Identities that
    copy across devices: buffers of their own."""
    for index in sorted(range(len(ops)), key=lambda i: ops[i].level):
        op = ops[index]
        if index in copies:
            continue
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
