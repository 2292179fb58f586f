"""What TensorFlow's graph passes do to a step before it runs, mirrored on the analysis's ops
and tensors (lms/graph/step.py) so that it simulates what runs: IdentityN bypassed, reads that never
happen dropped, neutral arithmetic (x * 1) as an alias, pruned ops marked, constants found."""

import math

import tensorflow as tf


def bypass_identity_n(ops, tensors, graph_outputs: set, kept: set) -> list:
    """Let the readers of an IdentityN's output k read its input k (what Grappler's dependency
    optimizer does before the step runs; the rewrite does it in the graph too).

    Keras 3's optimizer passes every gradient through one IdentityN: read as written, no
    variable update could run before the last gradient exists, and an enforced order
    (lms/planning/ordering.py) would have to hold all gradients until then. Only IdentityN ops
    without control inputs, not returned and not kept as control outputs, are bypassed.
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


def drop_dead_reads(ops, tensors, graph_outputs: set) -> None:
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


def drop_shape_reads(tf_ops, ops, tensors, shape_ops) -> int:
    """Forget reads of a fully defined shape alone (`shape_ops`: Shape, ShapeN, Size, Rank):
    Grappler's constant folding makes them constants before the step runs, so they hold no
    buffer. Read as written, a gradient's Shape of a forward activation (Keras's Conv1D and
    Dense gradients take the input's shape) kept the activation on the device to the backward
    pass, where the planner would swap it back in for a read of its shape. The op keeps its
    inputs (the order still has it after them). Returns how many reads were dropped."""
    dropped = 0
    for index, op in enumerate(tf_ops):
        if op.type not in shape_ops:
            continue
        for position, tensor in enumerate(op.inputs):
            if not tensor.shape.is_fully_defined():
                continue
            source = ops[index].inputs[position]
            if (index, position) in tensors[source].consumers:
                tensors[source].consumers.remove((index, position))
                dropped += 1
    return dropped


# Grappler's constant folding leaves larger values to run as kernels (ConstantFolding's
# max_constant_size_in_bytes, 10 MiB by default).
MAX_FOLDED_BYTES = 10 * 2**20


def mark_constants(tf_ops, ops, tensors, shape_ops) -> int:
    """Set `OpInfo.constant` on the ops whose value Grappler knows before the step runs: Consts,
    reads of a fully defined shape (`shape_ops`), and stateless ops without control inputs that
    compute from constants alone (up to MAX_FOLDED_BYTES). Constant folding makes them Consts,
    and its push-down moves a Const to any op of the expression that reads it: a control edge
    into one (the enforced order's chain) then binds ops the step never ordered. ResNet50 768²
    b1, a batch norm's `moments/scalar` chained after a Sub that read a swap-in, was pushed into
    the Mul that triggered the swap-in: a cycle, after which Grappler's arithmetic and dependency
    optimizers gave up ("couldn't be sorted in topological order") and the step measured 1.18x
    its simulated peak on Eigen's kernels. `ops` must be in an order where producers come
    first (levels). Returns how many ops are constant."""
    count = 0
    for index in sorted(range(len(ops)), key=lambda i: ops[i].level):
        op, tf_op = ops[index], tf_ops[index]
        if op.type == "Const":
            constant = True
        elif op.type in shape_ops:
            constant = all(t.shape.is_fully_defined() for t in tf_op.inputs)
        else:
            small = sum(tensors[t].bytes for t in op.outputs) <= MAX_FOLDED_BYTES
            constant = (
                bool(op.inputs)
                and bool(op.outputs)
                and small
                and not op.control_inputs
                and not tf_op.op_def.is_stateful
                and all(ops[tensors[t].producer].constant for t in op.inputs)
            )
        op.constant = constant
        count += constant
    return count


def identity_input(op) -> int:
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


def mark_pruned(ops, tensors, graph_outputs, kept: set) -> None:
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
