"""Put a plan into the step's graph and make a callable of it (DESIGN.md §2.5).

For each swap: one swap-out op reading the tensor right after its producer; per group of far
readers one swap-in op, held back by a control dependency on the trigger, and the readers
rerouted to it. Serialized levels get a chain of control dependencies. The edited graph becomes a
new ConcreteFunction sharing the original's variables; the original is left as it was compiled.
"""

import tensorflow as tf

from lms import _tf_private
from lms.analysis import Analysis
from lms.planner import Plan
from lms.swap import SwapMechanism


def rewrite(concrete, analysis: Analysis, plan: Plan, mechanism: SwapMechanism):
    """Edit `concrete.graph` in place per `plan`; return the new callable."""
    graph = concrete.graph
    tf_ops = graph.get_operations()[: len(analysis.ops)]
    tensor_of = {}
    for op in tf_ops:
        for tensor in op.outputs:
            tensor_of[tensor.name] = tensor
    with graph.as_default():
        for swap in plan.swaps:
            info = analysis.tensors[swap.tensor]
            tensor = tensor_of[info.name]
            with tf.control_dependencies(None), tf.name_scope("lms"):
                with tf.device(tensor.device or None):
                    stored = mechanism.swap_out(tensor, readers=len(swap.swap_ins))
                for swap_in in swap.swap_ins:
                    with tf.control_dependencies([tf_ops[swap_in.trigger]]):
                        copy = mechanism.swap_in(stored, tensor)
                    for consumer, position in swap_in.consumers:
                        _tf_private.update_input(tf_ops[consumer], position, copy)
            if plan.parameters.sync_mode & 1:  # synchronous swap-out
                for consumer in swap.near_consumers:
                    _tf_private.add_control_input(tf_ops[consumer], stored.op)
        for level in sorted(plan.serialized_levels):
            chain = analysis.levels[level]
            for before, after in zip(chain, chain[1:], strict=False):
                _tf_private.add_control_input(tf_ops[after], tf_ops[before])
    return _tf_private.concrete_function_from_graph(concrete, graph)
