"""Put a plan into the step's graph and make a callable of it (DESIGN.md §2.5).

For each swap: one swap-out reading the tensor right after its producer; per group of far readers
one swap-in, held back by a control dependency on the trigger, and the readers rerouted to it.
Serialized levels get a chain of control dependencies. The edited graph becomes a new
ConcreteFunction sharing the original's variables; the original is left as it was compiled.

All swap ops of a plan enter the graph in one `import_graph_def` (one C call that builds every
node, then light Python wrappers), not through op constructors one at a time: for DeepLabV3+ at
1600² that is 3,263 ops, and the op constructors' Python overhead (~0.5 ms each) dominated.
"""

import tensorflow as tf
from tensorflow.core.framework import graph_pb2

from lms import _tf_private
from lms.analysis import Analysis
from lms.planner import Plan
from lms.swap import SwapMechanism

SCOPE = "lms"


def swap_graph_def(analysis: Analysis, plan: Plan, mechanism: SwapMechanism, tensor_of):
    """The GraphDef of every swap op, and per swap-in the (trigger, consumers, node names)."""
    graph_def = graph_pb2.GraphDef()
    swap_ins, swap_outs = [], []
    for number, swap in enumerate(plan.swaps):
        info = analysis.tensors[swap.tensor]
        tensor = tensor_of[info.name]
        out_nodes = mechanism.swap_out_nodes(f"s{number}/", info.name, tensor, len(swap.swap_ins))
        graph_def.node.extend(out_nodes)
        stored = out_nodes[-1].name
        swap_outs.append((swap, stored))
        for group, swap_in in enumerate(swap.swap_ins):
            in_nodes = mechanism.swap_in_nodes(f"s{number}/g{group}/", stored, tensor)
            graph_def.node.extend(in_nodes)
            swap_ins.append((swap_in, in_nodes[0].name, in_nodes[-1].name))
    return graph_def, swap_outs, swap_ins


def rewrite(concrete, analysis: Analysis, plan: Plan, mechanism: SwapMechanism):
    """Edit `concrete.graph` in place per `plan`; return the new callable."""
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
    for level in sorted(plan.serialized_levels):
        chain = analysis.levels[level]
        for before, after in zip(chain, chain[1:], strict=False):
            _tf_private.add_control_input(tf_ops[after], tf_ops[before])
    return _tf_private.concrete_function_from_graph(concrete, graph)
