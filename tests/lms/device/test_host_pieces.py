"""lms/device/host_pieces.py: the emulated device's piece copies. A chain of split ops reads its
pieces host to host, whichever is split first; a split output read in place is read as often as
it was counted for (its pruned assemble's read given back), so every host array is freed within
the step. Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import numpy as np
import pytest
import tensorflow as tf

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.rewrite import split_op

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("order", ["producers-first", "readers-first"])
def test_a_chain_of_split_ops_passes_its_pieces_host_to_host(order, conv_pool_chain):
    """A convolution read only by a pool, read only by a pool: split, each reads the pieces of
    the one before in place on the host (split before or after it), so no whole output of the
    chain is assembled on the device and no copy of one goes back to the host."""
    x = tf.random.stateless_normal([1, 20, 16, 3], seed=(1, 2))
    kernel = tf.random.stateless_normal([3, 3, 3, 4], seed=(3, 4))
    want = [t.numpy() for t in tf.function(conv_pool_chain)(x, kernel)]
    concrete = tf.function(conv_pool_chain).get_concrete_function(x, kernel)
    graph, store = concrete.graph, HostStore()
    io = store.pieces()
    kinds = ("Conv2D", "MaxPool", "MaxPoolGrad", "Conv2DBackpropInput", "Conv2DBackpropFilter")
    names = [op.name for op in graph.get_operations() if op.type in kinds]
    for name in names if order == "producers-first" else names[::-1]:
        split_op(graph.get_operation_by_name(name), 3, io)
    function = _tf_private.concrete_function_from_graph(concrete, graph)
    for _ in range(2):  # every host array freed after each step
        got = function(x, kernel)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
        assert store.held_bytes == 0
    # to the host per step: each split op's output by its pieces (the filter gradient is summed
    # on the device), x once for the convolution and its filter gradient (one host copy for
    # both), the loss's gradient 2z for the second pool's gradient; nothing of the chain whole
    conv, y, z = 20 * 16 * 4, 10 * 8 * 4, 5 * 4 * 4
    outputs = conv + y + z + y + conv + x.numpy().size  # ... + the pools' and the input's grads
    kept = x.numpy().size + z
    assert store.take_traffic().out_bytes == 2 * 4 * (outputs + kept)


def _relu_scaled(x):
    return tf.nn.relu(x) * 2.0 + 1.0


@pytest.mark.parametrize("order", ["producers-first", "readers-first"])
def test_each_host_array_is_read_as_often_as_counted_and_freed_by_its_last_read(order):
    """ReLU -> Mul, both split in four along the rows, the Add after them whole. The ReLU's
    output array is counted for the Mul's four pieces, which read it in place; its assemble,
    which nothing reads now, is pruned and its read given back (split first, the Mul kept the
    ReLU's output itself: that keep is moot and its four reads move to the array). So per step:
    to the host x, the ReLU's four pieces, the Mul's four; back 4 + 4 slices and the Mul's
    assemble; nothing held after the step, nothing left for `clear`."""
    x = tf.random.stateless_normal([1, 8, 4, 2], seed=(1, 2))
    want = tf.function(_relu_scaled)(x).numpy()
    concrete = tf.function(_relu_scaled).get_concrete_function(x)
    graph, store = concrete.graph, HostStore()
    io = store.pieces()
    names = [op.name for op in graph.get_operations() if op.type in ("Relu", "Mul")]
    for name in names if order == "producers-first" else names[::-1]:
        split_op(graph.get_operation_by_name(name), 4, io)
    function = _tf_private.concrete_function_from_graph(concrete, graph)
    for _ in range(2):
        assert np.array_equal(function(x).numpy(), want)
        assert store.held_bytes == 0
        traffic = store.take_traffic()
        assert (traffic.swap_outs, traffic.swap_ins) == (1 + 4 + 4, 4 + 4 + 1)
        assert traffic.out_bytes == traffic.in_bytes == 3 * x.numpy().nbytes
    assert store.clear() == (0, 0)
