"""Read a traced step's `FuncGraph` into the `Analysis` the planner and simulator work on
(`read_graph`): each op and tensor with its static size, buffers shared by aliases, what
TensorFlow's graph passes do before the step runs (lms/graph/passes.py), categorized
topological levels, and the copies across the host/device line of a step with TensorFlow's own
copies. The types it fills are lms/graph/step.py's."""

import logging

import tensorflow as tf

from lms.graph.loops import IF_OPS, WHILE_OPS, accumulated_lists, passed_lists
from lms.graph.names import HOST_ARRAYS, RECOMPUTED_SCOPES
from lms.graph.passes import (
    bypass_identity_n,
    drop_dead_reads,
    drop_shape_reads,
    identity_input,
    mark_constants,
    mark_pruned,
)
from lms.graph.step import (
    ALIAS_OPS,
    HOST_STORE_SCOPES,
    NEVER_SWAP_OPS,
    NO_BUFFER_OPS,
    ONEDNN_PAIRED_READS,
    PY_FUNC_OPS,
    SHAPE_OPS,
    VIEW_OPS,
    WORKSPACE_BYTES_PER_ELEMENT,
    Analysis,
    GiB,
    MiB,
    OpInfo,
    TensorInfo,
    tensor_bytes,
)

log = logging.getLogger("lms")


def _variable_bytes(variables) -> int:
    return sum(v.shape.num_elements() * v.dtype.size for v in variables)


# Ops whose output list holds a copy of input 0's elements (in a recurrent step, a layer's input
# sequence as the list its forward loop reads; the gradient's, as the list its loop reads). Both
# these and a list's zeros (ZerosLike) were sized 0 as variants: two GRUs of 256 over 256 tokens,
# batch 64, their lists streamed, measured 100 MiB where the simulation said 48.
LIST_COPIES = frozenset({"TensorListFromTensor"})


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
    hold while they run (`lms.internal.analyze` adds that). `variables` default to the graph's
    captured variables.

    `host_device_marker`: ops whose device string contains it (e.g. "CPU" when computing on a GPU)
    are on the host: their tensors are never swapped.
    `paired_reads`: (op type, input position) reads a swap-in must not feed (the tensor is then
    not swapped); `cpu_paired_reads()` gives those of this TensorFlow's CPU kernels.
    """
    tf_ops = graph.get_operations()
    op_index = {op: i for i, op in enumerate(tf_ops)}
    tensor_index, tensors, ops, edges, unknown, loops = {}, [], [], 0, 0, {}
    passed = {}  # While op index -> outputs that are its input lists, passed through
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
        if op.type in LIST_COPIES and outputs:
            # a list made of a tensor's slices holds a copy of each (TensorFlow's kernel
            # allocates every element): the tensor's bytes, not a variant's 0
            tensors[outputs[0]].bytes = tensor_bytes(op.inputs[0], batch_size) or 0

        if op.type in WHILE_OPS:
            passed[i] = passed_lists(graph, op)
        if op.type in WHILE_OPS | IF_OPS:
            sizes = accumulated_lists(graph, op, lambda t: tensor_bytes(t, batch_size))
            for k, state in sizes.items():
                tensors[outputs[k]].bytes = state.bytes
                tensors[outputs[k]].list_element = state.element
                loops[i] = loops.get(i, 0) + state.bytes
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
    drop_shape_reads(tf_ops, ops, tensors, SHAPE_OPS)
    if hasattr(graph, "control_outputs"):  # a function graph: TensorFlow prunes what is unused
        mark_pruned(ops, tensors, outputs, kept)

    levels = assign_levels(ops, tensors)
    mark_constants(tf_ops, ops, tensors, SHAPE_OPS)

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
        # (a copy: a buffer; a view: its buffer's, see _fix_alias_buffers)
        never = op.type in NEVER_SWAP_OPS - VIEW_OPS and info.producer not in copies
        stackable = rank >= 2 or info.list_element is not None  # (a list: stacked, rank >= 2)
        info.swappable = not never and info.bytes > 0 and not on_host and stackable
        # a max pool's output recomputed for its gradient, whole or a piece's, to read at once
        # (lms/graph/pool_reads.py): never swapped (GoogLeNet 1024² in 150 MiB: every piece
        # then took TensorFlow's slow kernel), and not a paired read planning could give up
        recomputed = op.name.startswith(RECOMPUTED_SCOPES) and any(
            (ops[c].type, p) in ONEDNN_PAIRED_READS for c, p in info.consumers
        )
        info.swappable = info.swappable and not recomputed
        for consumer, position in info.consumers if paired_reads else ():
            if (ops[consumer].type, position) in paired_reads and not info.paired_with:
                info.swappable = False
                info.paired_with = "" if recomputed else ops[consumer].type
                # the workspace lives as long as the output (both read by the gradient)
                info.bytes += info.bytes // itemsize * WORKSPACE_BYTES_PER_ELEMENT
    _fix_alias_buffers(ops, tensors, copies, passed)
    for i, op in enumerate(tf_ops):
        if op.type == "ZerosLike" and op.inputs and op.inputs[0].dtype == tf.variant:
            # the zeros of a list (while_v2's gradient for a loop output it gets none for): a
            # zero element per element of the list, as many bytes as the list's buffer
            source = tensors[ops[i].inputs[0]].buffer
            tensors[ops[i].outputs[0]].bytes = tensors[source].bytes

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


def assign_levels(ops: list, tensors: list) -> list:
    """Categorized topological sort (Kahn's algorithm, one level per wave): each op's `level`
    set; returns the waves, level -> [op index] in index order (`Analysis.levels`; also a
    modelled analysis's, lms/split/modelled.py)."""
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
    waves = [[] for _ in range(1 + max((op.level for op in ops), default=-1))]
    for i, op in enumerate(ops):
        waves[op.level].append(i)
    return waves


def _cross_device_copies(ops: list, tensors: list, devices: list, marker) -> set:
    """Identities whose input is on the other side of the host/device line: TensorFlow copies
    the tensor across on that edge (lms.device.copies.DevicePieces: a split op's input kept on the
    host, a piece read to the device, a piece stored back), so the Identity's output is a buffer of
    its own, not an alias: a device copy counts on the device and can be swapped like any (as the
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


def _fix_alias_buffers(ops: list, tensors: list, copies=frozenset(), passed=None) -> None:
    """Point alias outputs at their root buffer, in level order (creation order need not be
    topological, so a chain of aliases resolves only this way). `copies` are Identities that
    copy across devices: buffers of their own. `passed`: per While, the outputs that are its
    input lists passed through (`lms.graph.loops.passed_lists`)."""
    passed = passed or {}
    for index in sorted(range(len(ops)), key=lambda i: ops[i].level):
        op = ops[index]
        if index in copies:
            continue
        for k in passed.get(index, ()):
            output = tensors[op.outputs[k]]
            output.buffer, output.bytes = tensors[tensors[op.inputs[k]].buffer].buffer, 0
            output.swappable = False
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
                # a view swaps as its buffer would (VIEW_OPS); a buffer that may not swap (a
                # step input's, a paired read's) keeps its views on the device too
                tensors[t].swappable &= tensors[tensors[t].buffer].swappable
