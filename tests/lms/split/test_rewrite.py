"""lms/split/rewrite.py: an op split into pieces computed in sequence (`split_op`) computes the
same bits, through nothing but the graph's `PieceCopies` members; what a split records; how many
pieces an op gets. Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import numpy as np
import pytest
import tensorflow as tf

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.split.pieces import PieceCopies
from lms.split.rewrite import PIECE_SHARE, pieces_for, split_op

pytestmark = pytest.mark.compat


def _step(a, b, bias):
    x = tf.nn.relu(a) * 3.0
    y = tf.math.add_n([x, b, a])
    return tf.nn.bias_add(y, bias)


@pytest.mark.parametrize("batch, axis", [(2, 0), (1, 1)])
def test_a_split_element_wise_op_computes_the_same_bits(batch, axis, exact_arithmetic):
    a = tf.random.stateless_normal([batch, 40, 24, 8], seed=(1, 2))
    b = tf.random.stateless_normal([batch, 40, 24, 8], seed=(3, 4))
    bias = tf.random.stateless_normal([8], seed=(5, 6))
    function = tf.function(_step)
    want = function(a, b, bias).numpy()
    concrete = function.get_concrete_function(a, b, bias)
    graph, store = concrete.graph, HostStore()
    add_n = next(op for op in graph.get_operations() if op.type == "AddN")
    split = split_op(add_n, 5, store.pieces(), "test")
    assert (split.op_type, split.pieces, split.axis) == ("AddN", min(5, 40 if axis else 2), axis)
    assert split.bytes == 4 * a.numpy().nbytes
    bias_add = next(op for op in graph.get_operations() if op.type == "BiasAdd")
    split_op(bias_add, 3, store.pieces())  # the bias broadcasts: read whole by each piece
    got = _tf_private.concrete_function_from_graph(concrete, graph)(a, b, bias).numpy()
    assert np.array_equal(got, want)
    assert store.held_bytes == 0  # every host copy read as often as it was kept for
    traffic = store.take_traffic()
    assert traffic.in_bytes == traffic.out_bytes > 0


class _Recorded:
    """A graph's piece copies that pass each call on to `io` and record its name: any member
    split_op asks for that `PieceCopies` does not name fails."""

    def __init__(self, io, loops: bool):
        self._io, self.calls, self.loops = io, [], loops

    def __getattr__(self, name):
        if name not in MEMBERS:
            raise AttributeError(f"split_op asked for {name!r}, not a PieceCopies member")
        member = getattr(self._io, name)
        if not callable(member):
            return member

        def call(*args):
            self.calls.append(name)
            return member(*args)

        return call


MEMBERS = {name for name in vars(PieceCopies) if not name.startswith("_")}
MEMBERS |= set(PieceCopies.__annotations__)


def test_split_op_drives_the_piece_copies_by_their_named_members_only(exact_arithmetic):
    """An AddN of three inputs in four pieces along the rows: its inputs kept, then per piece
    three reads, a store and the token the next piece waits for, then the assemble and the last
    store's token (what the op's waiters now wait for), then `replaced`; the same bits."""
    methods = {"keep", "read", "store_piece", "token", "assemble", "replaced", "finish"}
    looped = {"read_rows", "store_rows", "resume"}  # a loop's body's (lms/split/looped.py)
    assert methods | looped | {"keeps_ops", "loops"} == MEMBERS
    a = tf.random.stateless_normal([1, 40, 6, 8], seed=(1, 2))
    b = tf.random.stateless_normal([1, 40, 6, 8], seed=(3, 4))
    bias = tf.random.stateless_normal([8], seed=(5, 6))
    function = tf.function(_step)
    want = function(a, b, bias).numpy()
    concrete = function.get_concrete_function(a, b, bias)
    store = HostStore()
    io = _Recorded(store.pieces(), loops=False)  # every piece made (test_looped.py: loops)
    add_n = next(op for op in concrete.graph.get_operations() if op.type == "AddN")
    assert split_op(add_n, 4, io).pieces == 4
    piece = ["read"] * 3 + ["store_piece", "token"]
    assert io.calls == ["keep"] * 3 + piece * 4 + ["assemble", "token", "replaced"]
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(a, b, bias)
    assert np.array_equal(got.numpy(), want)
    assert store.held_bytes == 0


def test_pieces_for_brings_a_piece_under_its_share_of_the_room():
    room = 800
    assert pieces_for(int(5 * PIECE_SHARE * room), room, 64) == 5
    assert pieces_for(1, room, 64) == 2  # at least two
    assert pieces_for(100 * room, room, 64) == 64  # at most the split axis's length
    assert pieces_for(1, 0, 7) == 7  # no room at all: as many as the axis has
