"""A max pool's gradient that reads its pool's output recomputed, not kept from the forward pass.

A MaxPoolGrad reads its pool's output only to find each window's maximum. oneDNN's CPU kernels
pair a gradient with the pool whose output it reads directly (lms/graph/step.py
ONEDNN_PAIRED_READS: a workspace of the argmax, and the fast kernel); fed anything else (a swap-in,
a split pool's assembled output, a host copy) it takes TensorFlow's own kernel, 5-19x slower
(a 130 x 1024 x 192 piece of GoogLeNet 2048²'s second pool: 272-279 ms, recomputed 49-55 ms with
the pool included, equal to the bit).

So LMS recomputes instead: each piece of a split max pool gradient pools the input rows it reads
(lms/split/pieces.py, halo.py), and when planning gives up keeping the pools' outputs on the
device for their gradients (nothing fits so), every gradient reads its pool recomputed from its
own input once its incoming gradient exists (`recompute_pool_reads`), not a swap-in of the
output. The recomputed output lives only while its gradient runs, as a swap-in's would, but
moves no bytes and keeps the fast kernel; the forward output is then free after its forward
readers.
"""

import tensorflow as tf

from lms import _tf_private
from lms.graph.names import RECOMPUTE_SCOPE, RECOMPUTED_SCOPES, REWRITTEN_MARK

FORWARD_MAX_POOLS = {"MaxPoolGrad": tf.raw_ops.MaxPool, "MaxPool3DGrad": tf.raw_ops.MaxPool3D}


def max_pooled(grad_op, x, padding: str):
    """The forward max pool of `grad_op` (a MaxPoolGrad or MaxPool3DGrad) over `x`, with
    `padding` ("SAME", or "VALID" for rows padded already): its gradient's orig_output."""
    pool = FORWARD_MAX_POOLS[grad_op.type]
    attrs = {name: grad_op.get_attr(name) for name in ("ksize", "strides", "data_format")}
    if padding == "EXPLICIT":  # (a MaxPoolGrad's only)
        attrs["explicit_paddings"] = grad_op.get_attr("explicit_paddings")
    return pool(input=x, padding=padding, **attrs)


def recompute_pool_reads(graph) -> int:
    """Reroute every max pool gradient of `graph` (a FuncGraph) that does not read a recomputed
    pool yet (its own, or a split piece's) to one made beside it (module docstring), on its
    device. Returns how many."""
    rerouted = 0
    for op in list(graph.get_operations()):
        if op.type not in FORWARD_MAX_POOLS or op.inputs[1].op.name.startswith(RECOMPUTED_SCOPES):
            continue
        name = op.name.replace("/", "_")
        # after the incoming gradient, not as soon as the input exists (the forward pass): else
        # its output would live from there to the gradient, as the kept one did
        after, scope = graph.control_dependencies([op.inputs[2].op]), f"{RECOMPUTE_SCOPE}/{name}/"
        with graph.as_default(), graph.name_scope(scope), after, graph.device(op.device):
            pooled = max_pooled(op, op.inputs[0], op.get_attr("padding").decode())
        _tf_private.update_input(op, 1, pooled)
        rerouted += 1
    if rerouted:  # an edit: the next plan of this step traces it afresh (a plan only reported
        # left it so, and the next planned the edited graph as if traced: another plan)
        setattr(graph, REWRITTEN_MARK, True)
    return rerouted
