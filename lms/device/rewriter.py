"""Put a plan into the step's graph and make a callable of it (docs/lms.md).

For each swap: one swap-out reading the tensor right after its producer; per group of far readers
one swap-in, held back by a control dependency on the trigger, and the readers rerouted to it.
In an enforced order the swaps are links of the chain: the op after a producer waits for its
swap-out, the op after a trigger for its swap-in. Serialized levels get a chain of control
dependencies. The edited graph becomes a new ConcreteFunction sharing the original's variables;
the original is left as it was compiled.

All swap ops of a plan enter the graph in one `import_graph_def` (one C call that builds every
node, then light Python wrappers), not through op constructors one at a time: for DeepLabV3+ at
1600² that is 3,263 ops, and the op constructors' Python overhead (~0.5 ms each) dominated.
"""

from typing import Protocol

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from lms import _tf_private
from lms.device.lists import ListSwaps
from lms.graph.loops import WHILE_OPS
from lms.graph.names import REWRITTEN_MARK, SWAP_SCOPE
from lms.graph.step import Analysis
from lms.planning.ordering import (
    FOLDED_OPS,
    UNCHAINED_OPS,
    anchor_ops,
    executed_ops,
    next_anchors,
    order_positions,
)
from lms.planning.planner import Plan, swap_out_waiter

SCOPE = SWAP_SCOPE


class SwapNodes(Protocol):
    """What the rewriter asks of a mechanism (lms/device/mechanism.py `Mechanism`, of which this
    is the swap part): the NodeDefs of one swap. `source` names the swapped tensor ("op:0"),
    `tensor` is it."""

    keeps_ops: bool  # whether the step must keep its nodes from Grappler (control outputs)
    # whether its copies move a loop's tensor list as it is; else lms/device/lists.py stacks the
    # list for them, and reads the swapped-in host array with `host_read_nodes`
    copies_lists: bool

    def swap_out_nodes(self, prefix: str, source: str, tensor, readers: int) -> list:
        """Nodes whose last one's output 0 is what the swap-ins read (a host copy or a handle);
        `readers`: how many swap-ins will read it."""

    def swap_in_nodes(self, prefix: str, stored: str, tensor) -> list:
        """Nodes whose last one's output 0 equals `tensor` again, on its device. The first node
        is the one the trigger's control dependency holds back."""


def swap_graph_def(analysis: Analysis, plan: Plan, mechanism: SwapNodes, tensor_of):
    """The GraphDef of every swap op, and per swap-in the (trigger, consumers, node names)."""
    graph_def = graph_pb2.GraphDef()
    swap_ins, swap_outs = [], []
    for number, swap in enumerate(plan.swaps):
        info = analysis.tensors[swap.tensor]
        tensor = tensor_of[info.name]
        swaps = mechanism
        if info.list_element is not None and not mechanism.copies_lists:
            swaps = ListSwaps(mechanism, info.list_element)
        out_nodes = swaps.swap_out_nodes(f"s{number}/", info.name, tensor, len(swap.swap_ins))
        graph_def.node.extend(out_nodes)
        stored = out_nodes[-1].name
        swap_outs.append((swap, stored))
        for group, swap_in in enumerate(swap.swap_ins):
            in_nodes = swaps.swap_in_nodes(f"s{number}/g{group}/", stored, tensor)
            graph_def.node.extend(in_nodes)
            swap_ins.append((swap_in, in_nodes[0].name, in_nodes[-1].name))
    return graph_def, swap_outs, swap_ins


def rewrite(concrete, analysis: Analysis, plan: Plan, mechanism: SwapNodes):
    """Edit `concrete.graph` in place per `plan`; return the new callable. `mechanism`: a
    `Mechanism` or its `swaps` (the same object)."""
    graph = concrete.graph
    tf_ops = graph.get_operations()[: len(analysis.ops)]
    tensor_of = {tensor.name: tensor for op in tf_ops for tensor in op.outputs}
    graph_def, swap_outs, swap_ins = swap_graph_def(analysis, plan, mechanism, tensor_of)
    sources = {analysis.tensors[swap.tensor].name for swap in plan.swaps}
    # the importer enters a tf.device scope per node that names a device (~0.5 ms each): place
    # the nodes after the import instead
    devices = {}
    for node_def in graph_def.node:
        if node_def.device:
            devices[node_def.name] = node_def.device
            node_def.ClearField("device")
    with graph.as_default(), tf.control_dependencies(None):
        imported = tf.graph_util.import_graph_def(
            graph_def,
            input_map={name: tensor_of[name] for name in sources},
            return_elements=[n.name for n in graph_def.node],
            name=SCOPE,  # uniquified by the importer's name scope
        )
    new_op = {node.name: op for node, op in zip(graph_def.node, imported, strict=True)}
    for consumer, position, source in analysis.bypassed:  # as the analysis read the graph
        _tf_private.update_input(
            tf_ops[consumer], position, tensor_of[analysis.tensors[source].name]
        )
    for name, device in devices.items():
        _tf_private.set_device(new_op[name], device)
    for swap_in, first, last in swap_ins:
        _tf_private.add_control_input(new_op[first], tf_ops[swap_in.trigger])
        for consumer, position in swap_in.consumers:
            _tf_private.update_input(tf_ops[consumer], position, new_op[last].outputs[0])
    if plan.parameters.sync_mode & 1:  # synchronous swap-out
        for swap, stored in swap_outs:
            for consumer in swap.near_consumers:
                _tf_private.add_control_input(tf_ops[consumer], new_op[stored])
    if plan.order is not None:
        _chain(analysis, plan.order, tf_ops)
        # (swap, its swap-out op, the op that waits for it or -1), found once for both uses
        awaited = [(s, new_op[n], swap_out_waiter(analysis, plan, s)) for s, n in swap_outs]
        _wait_for_swap_outs(tf_ops, awaited)
        _swap_ins_after_swap_outs(analysis, awaited, swap_ins, new_op)
        # A swap-in waits for its trigger, and only its readers wait for it: its copy runs
        # beside the ops between the two (`swapin_ahead`), inside the interval the simulation
        # holds it for (from its trigger to its last reader), so it can only come later than
        # simulated, never earlier. Until issue 43 the anchor after the trigger waited for the
        # copy too: every swap-in's copy then stalled the chain (WaveNet 16000 b4, auto-tuned
        # for its plain peak: 0.73x the plain step's speed).
    for level in sorted(plan.serialized_levels):
        chain = [i for i in analysis.levels[level] if not analysis.ops[i].constant]
        for before, after in zip(chain, chain[1:], strict=False):
            _tf_private.add_control_input(tf_ops[after], tf_ops[before])
    _split_sums(analysis, graph, tf_ops)
    one_iteration_at_a_time(analysis, tf_ops)
    if mechanism.keeps_ops:
        keep_from_grappler(graph, imported)
    setattr(graph, REWRITTEN_MARK, True)
    return _tf_private.concrete_function_from_graph(concrete, graph)


def keep_from_grappler(graph, ops) -> None:
    """Make `ops` control outputs of the step's function graph: they become the FunctionDef's
    control returns, which reach Grappler as nodes to preserve (`GrapplerItem::NodesToPreserve`).
    Without this the dependency optimizer bypasses swap Identities that add no cross-device edge
    once removed, and the far readers read the device tensor that was to be swapped
    (../shared/gpu-desk-check.md B2). Pass only ops that run anyway: a control output runs."""
    kept = set(graph.control_outputs)
    graph.control_outputs.extend(op for op in ops if op not in kept)


def _split_sums(analysis: Analysis, graph, tf_ops) -> None:
    """Each AddN of more than two floating-point inputs becomes a chain of two-input adds (the
    same left-to-right sum), in the AddN's place in the order.

    Grappler's memory optimizer rewrites an AddN of three or more inputs into a temporary
    variable that each input is added to (`SchedulingPass`) when its static estimate of the
    step's peak is over 80 % of the device's memory, which on the CPU is the RAM available
    when the step is compiled: an LMS step, whose estimate counts every swapped tensor, is. The
    rewritten sum holds its output and a zeros tensor of the output's size besides its inputs,
    and constant folding keeps the zeros as a constant for as long as the step lives. ResNet50
    1408² b1, everything swapped: measured 1.38x the simulated peak, 245 MiB held between steps;
    a sum of two inputs is never rewritten."""
    outputs = {analysis.tensors[t].name for t in analysis.outputs}
    for index, info in enumerate(analysis.ops):
        op = tf_ops[index]
        if (
            info.type != "AddN"
            or not info.runs
            or len(op.inputs) <= 2
            or not op.outputs[0].dtype.is_floating
            or op.outputs[0].name in outputs
        ):
            continue
        scope = f"{op.name}/{SCOPE}_sum/"  # absolute: under the AddN's own name
        with graph.as_default(), tf.control_dependencies(None), tf.name_scope(scope):
            adds = [tf.raw_ops.AddV2(x=op.inputs[0], y=op.inputs[1])]
            for term in list(op.inputs)[2:]:
                adds.append(tf.raw_ops.AddV2(x=adds[-1], y=term))
        for add in adds:
            _tf_private.set_device(add.op, op.device)
        for control in op.control_inputs:
            _tf_private.add_control_input(adds[0].op, control)
        for consumer in list(op.outputs[0].consumers()):
            for position, tensor in enumerate(consumer.inputs):
                if tensor is op.outputs[0]:
                    _tf_private.update_input(consumer, position, adds[-1])
        _tf_private.move_control_outputs(op, adds[-1].op)


def one_iteration_at_a_time(analysis: Analysis, tf_ops) -> None:
    """Each `While` of the step runs its iterations one after another (`parallel_iterations`
    1, from while_v2's 32), as the simulation counts a loop: its body's peak once, beside the
    lists it fills (lms/graph/loops.py). Also where a step with loops needs no swap (the
    pipeline edits its graph for this alone: a plain recurrent step measured up to 2x its
    simulated peak with TensorFlow's 32). Left at 32, the executor ran the gradient loop's
    iterations ahead of their weight gradients' sums: three LSTMs of 256 over 64 tokens, batch
    16, with Eigen's kernels, a plan simulated at 36.0 MiB measured 90.7 (sixty 1 MiB weight
    gradients of pending iterations held at once; the plain step 57.1 in its usual order, 68.6
    or more in the other); one at a time it measured 35.3, and its step was no slower (0.51
    against 0.55 s)."""
    for index, info in enumerate(analysis.ops):
        if info.type in WHILE_OPS:
            _tf_private.set_int_attr(tf_ops[index], "parallel_iterations", 1)


def _chained_ops(analysis: Analysis, order) -> list:
    """The ops of `order` that the chain links. Ops TensorFlow prunes stay out of it (the chain
    would make them run), and so do UNCHAINED_OPS and constants (`OpInfo.constant`: Grappler
    moves them to any reader, and their chain edges with them, which closed cycles)."""
    executed = executed_ops(analysis)
    return [
        int(index)
        for index in order
        if executed[index]
        and analysis.ops[index].type not in UNCHAINED_OPS
        and not analysis.ops[index].constant
    ]


def _chain(analysis: Analysis, order, tf_ops) -> None:
    """Make the ops that run follow `order`: each waits for the one before it
    (lms/planning/ordering.py),
    and each anchor (`anchor_ops`) for the anchor before it as well: a link through an op
    Grappler folds or removes is lost with it (FOLDED_OPS). ResNet50 1024² b1 (the limit
    search's plan) ran 94 of 3,405 pairs of chained kernels side by side, and measured 1.18x its
    simulated peak (a 64 MiB swap-out awaited by a folded Shape still copying at the peak);
    with anchors none, 1.05x (the rest: allocator chunks)."""
    chained = _chained_ops(analysis, order)
    for previous, index in zip(chained, chained[1:], strict=False):
        op = analysis.ops[index]
        inputs = {analysis.tensors[t].producer for t in op.inputs}
        if previous not in inputs and previous not in op.control_inputs:
            _tf_private.add_control_input(tf_ops[index], tf_ops[previous])
    anchors = anchor_ops(analysis)
    linked = [index for index in chained if anchors[index]]
    adjacent = set(zip(chained, chained[1:], strict=False))
    for previous, index in zip(linked, linked[1:], strict=False):
        if (previous, index) not in adjacent and not _waits_for(analysis, index, previous):
            _tf_private.add_control_input(tf_ops[index], tf_ops[previous])


def _waits_for(analysis: Analysis, index: int, previous: int) -> bool:
    """Whether op `index` already waits for op `previous`: a control input, or a data input
    (directly or through ops that pass it on and that Grappler removes)."""
    op = analysis.ops[index]
    if previous in op.control_inputs:
        return True
    stack, seen = [analysis.tensors[t].producer for t in op.inputs], set()
    while stack:
        producer = stack.pop()
        if producer == previous:
            return True
        if producer in seen:
            continue
        seen.add(producer)
        source = analysis.ops[producer]
        if source.type in FOLDED_OPS or source.type in UNCHAINED_OPS:
            stack.extend(analysis.tensors[t].producer for t in source.inputs)
    return False


def _wait_for_swap_outs(tf_ops, awaited) -> None:
    """In an enforced order, the anchor after a swapped tensor's producer waits for its swap-out:
    the tensor's device buffer is then released where the simulation frees it, not whenever
    the copy gets to run (on the CPU the measured peak of one ordered plan varied by 1.4x from
    run to run while swap-outs lagged behind the chain)."""
    for _, swap_out, waiter in awaited:
        if waiter >= 0:
            _tf_private.add_control_input(tf_ops[waiter], swap_out)


def _swap_ins_after_swap_outs(analysis: Analysis, awaited, swap_ins, new_op) -> None:
    """In an enforced order, a swap-in's copy waits for the swap-outs that the anchor after its
    trigger waits for, of tensors made at or before the trigger: the simulation frees those
    buffers and allocates the copy at that anchor's step, so the copy must not come first. Left
    free, the two copies start together after the trigger, and the swap-in's buffer was
    allocated while the swapped-out one was still held (ResNet50 768² b1, a batch norm gradient
    whose output went to the host while the next one's input came back: one 36 MiB buffer more
    than simulated, 1.06x the simulated peak on Eigen's kernels)."""
    where, after = order_positions(analysis), next_anchors(analysis)
    by_waiter = {}  # anchor -> swap-out ops it waits for, with their producers' positions
    for swap, swap_out, waiter in awaited:
        if waiter >= 0:
            producer = analysis.tensors[swap.tensor].producer
            by_waiter.setdefault(waiter, []).append((where[producer], swap_out))
    for swap_in, first, _ in swap_ins:
        waiter = int(after[swap_in.trigger])
        for made, swap_out in by_waiter.get(waiter, ()):
            if made <= where[swap_in.trigger]:  # never one its readers make: a cycle
                _tf_private.add_control_input(new_op[first], swap_out)
