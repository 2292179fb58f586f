"""lms/graph/pool_reads.py: a max pool gradient reading its pool recomputed computes the same
gradient, runs after its incoming gradient (not in the forward pass), and its recomputed output
is never swapped, whatever the planning's pairing. Marked compat: also run on TensorFlow
2.14.1 (Keras 2)."""

import numpy as np
import pytest
import tensorflow as tf

from lms import _tf_private
from lms.graph.names import REWRITTEN_MARK
from lms.graph.pool_reads import recompute_pool_reads
from lms.graph.step import ONEDNN_PAIRED_READS
from lms.tuning.analysis import analyze

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("three_d", [False, True], ids=["2d", "3d"])
def test_a_gradient_reads_its_pool_recomputed_after_its_incoming_gradient(three_d):
    pool = tf.nn.max_pool3d if three_d else tf.nn.max_pool2d
    shape = [2, 9, 8, 7, 3] if three_d else [2, 13, 11, 3]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = pool(tf.nn.relu(x), 3, 2, "SAME")  # the ReLU's zeros tie in windows
            loss = tf.reduce_sum(tf.sin(y))
        return tape.gradient(loss, x)

    x = tf.random.stateless_normal(shape, seed=(1, 2))
    want = step(x).numpy()
    concrete = step.get_concrete_function(x)
    graph = concrete.graph
    assert not getattr(graph, REWRITTEN_MARK, False)
    assert recompute_pool_reads(graph) == 1
    assert recompute_pool_reads(graph) == 0  # once per gradient
    # an edit: the step's next plan traces it afresh (a plan only reported leaves it so)
    assert getattr(graph, REWRITTEN_MARK, False)
    grad = next(
        op for op in graph.get_operations() if op.type.startswith("MaxPool") and "Grad" in op.type
    )
    recomputed = grad.inputs[1].op
    assert recomputed.name.startswith("lms_pool/") and recomputed.inputs[0] is grad.inputs[0]
    assert grad.inputs[2].op in recomputed.control_inputs
    got = _tf_private.concrete_function_from_graph(concrete, graph)(x)
    np.testing.assert_array_equal(got.numpy(), want)
    for reads in (ONEDNN_PAIRED_READS, frozenset()):
        analysis = analyze(graph, paired_reads=reads)
        info = next(t for t in analysis.tensors if t.name == recomputed.outputs[0].name)
        assert not info.swappable and info.paired_with == ""
