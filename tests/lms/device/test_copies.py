"""lms/device/copies.py: TensorFlow's copies. DeviceCopy's swap nodes are laid out as the desk
check asks (the swap-out and the gated swap-in on the host, then a copy on the compute device);
DevicePieces' pieces compute the same (on the CPU, where both devices are the CPU), and `finish`
keeps exactly the ops it made that run from Grappler as the step's control outputs."""

import numpy as np
import pytest
import tensorflow as tf

from lms import _tf_private
from lms.device.copies import DeviceCopy, DevicePieces
from lms.graph.names import SWAP_IN, SWAP_IN_COPY, SWAP_OUT
from lms.split.layouts import splittable
from lms.split.rewrite import running_ops, split_op

HOST, COMPUTE = "/device:CPU:0", "/device:GPU:0"


def test_device_copys_swap_in_is_gated_on_the_host_and_copied_to_the_device():
    tensor = tf.TensorSpec([4, 8], tf.float32)
    swaps = DeviceCopy(HOST, COMPUTE)
    (out,) = swaps.swap_out_nodes("s0/", "relu:0", tensor, 2)
    gated, copy = swaps.swap_in_nodes("s0/g0/", out.name, tensor)
    assert (out.name, out.op, list(out.input), out.device) == (
        f"s0/{SWAP_OUT}",
        "Identity",
        ["relu:0"],
        HOST,
    )
    assert (gated.name, list(gated.input), gated.device) == (f"s0/g0/{SWAP_IN}", [out.name], HOST)
    assert (copy.name, list(copy.input), copy.device) == (
        f"s0/g0/{SWAP_IN_COPY}",
        [gated.name],
        COMPUTE,
    )


def _split_all(graph, io) -> set:
    """Every op of `graph` that runs and can be split, split in three: the types split."""
    running = running_ops(graph)
    ops = [op for op in graph.get_operations() if op in running and splittable(op) is None]
    return {split_op(op, 3, io).op_type for op in ops}


@pytest.mark.parametrize("batch", [1, 3])
def test_the_gpu_paths_pieces_compute_the_same_on_the_cpu(batch, conv_pool_chain):
    """DevicePieces (a GPU's host copies through the CPU device, a host concat) exercised here,
    where both devices are the CPU: every op of a conv -> pool -> pool step that can be split,
    split in three, along the batch or the rows; its memory is only a GPU's to measure."""
    x = tf.random.stateless_normal([batch, 20, 16, 3], seed=(1, 2))
    kernel = tf.random.stateless_normal([3, 3, 3, 4], seed=(3, 4))
    want = [t.numpy() for t in tf.function(conv_pool_chain)(x, kernel)]
    concrete = tf.function(conv_pool_chain).get_concrete_function(x, kernel)
    split = _split_all(concrete.graph, DevicePieces())
    kinds = {"Conv2D", "MaxPool", "MaxPoolGrad", "Conv2DBackpropFilter", "Conv2DBackpropInput"}
    assert kinds <= split
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x, kernel)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


def test_finish_keeps_the_ops_made_that_run_from_grappler(conv_pool_chain):
    """The assembled outputs that only split ops read never run (TensorFlow prunes them): made
    control outputs they would run, so only the others are kept; nothing else is added."""
    x = tf.random.stateless_normal([1, 20, 16, 3], seed=(1, 2))
    concrete = tf.function(conv_pool_chain).get_concrete_function(x, tf.zeros([3, 3, 3, 4]))
    graph, io = concrete.graph, DevicePieces()
    _split_all(graph, io)
    before, running = list(graph.control_outputs), running_ops(graph)
    io.finish(graph)
    added = graph.control_outputs[len(before) :]
    assert added == [op for op in io.made if op in running and op not in before]
    assert any(op not in running for op in io.made)  # (so the test tells the two apart)
    DevicePieces().finish(graph)  # nothing made: nothing added
    assert len(graph.control_outputs) == len(before) + len(added)
