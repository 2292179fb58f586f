"""Alike pieces as one loop (lms/split/looped.py): the pieces a run of alike calls makes are the
same ops (the layouts are translation invariant where `alike_runs` says so), loops are made and
the step still computes the same, with fewer ops.

Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from graph_ops import every_op
from split_steps import gradients_step, max_pool_gradient

from lms import _tf_private
from lms.device.host_store import HostStore
from lms.graph.loops import WHILE_OPS
from lms.graph.names import HOST_ARRAYS, PIECE_IN, PIECE_OUT
from lms.graph.reader import read_graph
from lms.split.layouts import layout
from lms.split.looped import alike_runs, looped_bounds, piece_bounds
from lms.split.norm import NormLayout
from lms.split.rewrite import piece_calls, running_ops, split_op

pytestmark = pytest.mark.compat


def _gradients_step(model, shape):
    """The step of sum(model(x)²)'s gradients for x and the weights (a tf.function)."""
    return gradients_step(model), shape


def _images(batch: int):
    """Padding, strided, dilated and depthwise convolutions, max and average pools (SAME and
    VALID, strided and not), a concat: 2D, 40 rows."""
    inputs = keras.Input((40, 9, 3), batch_size=batch)
    x = keras.layers.ZeroPadding2D(((3, 2), (1, 1)))(inputs)
    x = keras.layers.Conv2D(4, 5, strides=2, activation="relu")(x)
    x = keras.layers.MaxPooling2D(3, 2, padding="same")(x)
    y = keras.layers.Conv2D(4, 3, padding="same", dilation_rate=2)(x)
    y = keras.layers.DepthwiseConv2D(3, padding="same")(y)
    x = keras.layers.Concatenate()([x, keras.layers.AveragePooling2D(3, 1, "same")(y)])
    x = keras.layers.Conv2D(4, 3, padding="same")(x)
    return _gradients_step(
        keras.Model(inputs, keras.layers.AveragePooling2D(2)(x)), [batch, 40, 9, 3]
    )


def _volume(batch: int):
    """3D convolutions (strided and not), a max pool, an upsampling, a concat: 24 rows."""
    inputs = keras.Input((24, 6, 6, 2), batch_size=batch)
    skip = keras.layers.Conv3D(3, 3, padding="same", activation="relu")(inputs)
    down = keras.layers.Conv3D(4, 3, strides=2, padding="valid")(skip)
    up = keras.layers.UpSampling3D(2)(keras.layers.MaxPooling3D(2, padding="same")(skip))
    out = keras.layers.Conv3D(2, 3, padding="same")(keras.layers.Concatenate()([up, skip]))
    return _gradients_step(keras.Model(inputs, [out, down]), [batch, 24, 6, 6, 2])


def _described(ops: list) -> list:
    """The ops made for one piece as what they compute: type, attributes, output shapes and
    where each input comes from (an op of the piece by position, or a tensor outside it)."""
    made = {op: k for k, op in enumerate(ops)}
    found = []
    for op in ops:
        attrs = sorted((key, str(value)) for key, value in op.node_def.attr.items())
        shapes = [t.shape.as_list() for t in op.outputs]
        sources = [(made[t.op], t.value_index) if t.op in made else t.name for t in op.inputs]
        found.append((op.type, attrs, shapes, sources))
    return found


def _piece_ops(graph, op, found, start: int, stop: int) -> list:
    """The ops `found.piece` makes for [start, stop), each read given zeros of its rows."""
    axis = found.axis if found.read_axis is None else found.read_axis

    def read(i, lo, hi):
        shape = op.inputs[i].shape.as_list()
        shape[axis] = max(hi - lo, 0)
        return tf.zeros(shape, op.inputs[i].dtype)

    before = set(graph.get_operations())
    with graph.as_default(), tf.control_dependencies(None):
        found.piece(op, start, stop, read)
    return [x for x in graph.get_operations() if x not in before]


@pytest.mark.parametrize("batch", [1, 8], ids=["rows", "batch"])
@pytest.mark.parametrize("build", [_images, _volume], ids=["2d", "3d"])
def test_the_pieces_of_an_alike_run_are_the_same_ops(build, batch):
    """For every op of 2D and 3D Keras steps and several piece counts, the first, second and
    last pieces of each run `alike_runs` finds make the same ops: what a loop's body (piece
    a, its reads and stores moved by the index) computes for every piece of the run."""
    step, shape = build(batch)
    graph = step.get_concrete_function(tf.TensorSpec(shape)).graph
    running, runs = running_ops(graph), 0
    for op in list(graph.get_operations()):
        found = layout(op) if op in running else "pruned"
        if isinstance(found, (str, NormLayout)):
            continue
        for pieces in sorted({3, 5, found.length // 2, found.length}):
            bounds, calls = looped_bounds(
                found.length,
                pieces,
                lambda cut, found=found: [piece_calls(found, *b) for b in cut],
                True,
            )
            _piece_ops(graph, op, found, *bounds[0])  # (what a layout makes once per op)
            for a, b in alike_runs(calls):
                runs += 1
                first = _described(_piece_ops(graph, op, found, *bounds[a]))
                for p in (a + 1, b):
                    again = _described(_piece_ops(graph, op, found, *bounds[p]))
                    assert again == first, (op.name, op.type, pieces, a, p)
    assert runs > 10


def test_alike_runs_start_after_the_first_piece_and_need_the_same_moves():
    calls = [{"r": (0, 3)}, {"r": (2, 5)}, {"r": (7, 5)}, {"r": (12, 5)}, {"r": (17, 5)}]
    assert alike_runs(calls) == [(1, 4)]
    calls[3] = {"r": (13, 5)}  # moves 5, 6, 4: no three alike
    assert alike_runs(calls) == []
    assert piece_bounds(10, 4) == [(0, 3), (3, 6), (6, 9), (9, 10)]


def test_a_strided_gradients_pieces_take_rows_that_loop():
    """A stride-2 max pool's gradient in pieces of an odd count of rows reads 2 and 3 rows of
    its incoming gradient in turn: no run; `looped_bounds` takes pieces of fewer rows, a
    multiple of the stride, and all but the borders loop."""
    x = tf.random.stateless_normal([1, 60, 5, 2], seed=(1, 2))
    graph = max_pool_gradient().get_concrete_function(x).graph
    grad = next(op for op in graph.get_operations() if op.type == "MaxPoolGrad")
    found = layout(grad)
    calls = [piece_calls(found, *b) for b in piece_bounds(60, 12)]  # 5 rows each
    assert alike_runs(calls) == []
    bounds, calls = looped_bounds(60, 12, lambda cut: [piece_calls(found, *b) for b in cut], True)
    assert all((b - a) % 2 == 0 for a, b in bounds[:-1]) and len(bounds) >= 12
    (a, b), *more = alike_runs(calls)
    assert not more and len(bounds) - (b - a + 1) <= 2


@pytest.mark.parametrize("build", [_images, _volume], ids=["2d", "3d"])
def test_a_step_whose_pieces_loop_computes_the_same_with_fewer_ops(build):
    """Every op that can be split, split in pieces of a few rows with the emulated device's
    copies: loops are made, the graph has fewer ops than with every piece made, the gradients
    are the same to 1e-5, and every host array is read as often as kept for."""
    counts, results = {}, {}
    for loops in (False, True):
        step, shape = build(1)
        x = tf.random.stateless_normal(shape, seed=(5, 6))
        want = [t.numpy() for t in step(x)]
        concrete = step.get_concrete_function(x)
        store, running = HostStore(), running_ops(concrete.graph)
        io = store.pieces()
        io.loops = loops
        for op in list(concrete.graph.get_operations()):
            found = layout(op) if op in running else "pruned"
            if not isinstance(found, (str, NormLayout)) and found.length >= 8:
                split_op(op, found.length // 2, io)
        counts[loops] = len(every_op(concrete.graph))
        whiles = [op for op in concrete.graph.get_operations() if op.type in WHILE_OPS]
        assert bool(whiles) == loops
        got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(x)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
        assert store.held_bytes == 0
        results[loops] = [g.numpy() for g in got]
    assert counts[True] < 0.7 * counts[False], counts


def _handle_readers(graph, creator) -> set:
    """The ops that read host array `creator` makes, found from the graph's data flow alone: its
    handle goes from store to store (PIECE_OUT), through a loop (its output at the input's
    position), to the reads (PIECE_IN) and whatever else takes it."""
    readers, frontier = set(), [creator.outputs[0]]
    while frontier:
        tensor = frontier.pop()
        for consumer in tensor.consumers():
            readers.add(consumer)
            if consumer.type in WHILE_OPS:
                frontier += [
                    consumer.outputs[k] for k, t in enumerate(consumer.inputs) if t is tensor
                ]
            elif consumer.name.rsplit("/", 1)[-1].startswith(PIECE_OUT):
                frontier.append(consumer.outputs[0])
    return readers


def _split_looped(build):
    """The step of `build` (batch 1, kept: its graph refers to the model's variables) and its
    traced graph with every op that can be split, split in halves with the emulated device's
    copies (alike pieces loop)."""
    step, shape = build(1)
    graph = step.get_concrete_function(tf.TensorSpec(shape)).graph
    store, running = HostStore(), running_ops(graph)
    io = store.pieces()
    for op in list(graph.get_operations()):
        found = layout(op) if op in running else "pruned"
        if not isinstance(found, (str, NormLayout)) and found.length >= 8:
            split_op(op, found.length // 2, io)
    return step, graph


@pytest.mark.parametrize("build", [_images, _volume], ids=["2d", "3d"])
def test_a_host_array_is_held_until_its_last_reader_also_after_a_loop(build):
    """The analysis holds each split op's host array (`Analysis.host_arrays`) until every op
    that reads its handle has run, also the readers of the handle a loop gives back (an output
    read in place by a later split op, the assemble). Before, an array a loop filled was freed
    when the loop ended: the 3D U-Net 64³ in 250 MiB simulated 598 MiB on the host and held 901."""
    step, graph = _split_looped(build)
    ops, running = graph.get_operations(), running_ops(graph)  # the pieces' ops too
    held = [{ops[i] for i in members} for _, members in read_graph(graph, quiet=True).host_arrays]
    after_loops = 0
    for _, names in getattr(graph, HOST_ARRAYS).values():
        creator = graph.get_operation_by_name(names[0])
        (members,) = [m for m in held if creator in m]
        readers = {op for op in _handle_readers(graph, creator) if op in running}
        assert readers <= members, sorted(op.name for op in readers - members)
        after_loops += any(op.type in WHILE_OPS for op in readers)
    assert after_loops >= 5


def _ancestors(op) -> set:
    """The ops `op` depends on, by data or control."""
    found, frontier = set(), [op]
    while frontier:
        for before in [t.op for t in frontier[-1].inputs] + list(frontier.pop().control_inputs):
            if before not in found:
                found.add(before)
                frontier.append(before)
    return found


@pytest.mark.parametrize("build", [_images, _volume], ids=["2d", "3d"])
def test_a_loops_piece_waits_for_its_index_alone(build):
    """In each loop's body, no read of the host and no max pool (a pool gradient's recomputed
    pool) depends on what the loop carries (the stores of the piece before). A piece that waited
    for them closed a cycle through the lowered loop's back edges; oneDNN's graph rewrite visits
    the graph in a depth-first post order that does not skip them, and so reached some bodies'
    max pool gradients before their pools: TensorFlow's own kernel, without the pool's workspace,
    for 1 to 7 of GoogLeNet 4096²'s 7 alike loops, which ones changing from process to process.
    A cycle is the graph's, so the graph is what is tested, on either kernel set."""
    step, graph = _split_looped(build)
    reads = pools = 0
    for loop in [op for op in graph.get_operations() if op.type in WHILE_OPS]:
        body = _tf_private.library_function(graph, loop, "body").graph
        # while_v2's loop counter and trip count, the index, then what the loop carries and
        # what it captures (given back as it came)
        pairs = list(zip(body.inputs, body.outputs, strict=False))[3:]
        carried = {given.op for given, back in pairs if back is not given}
        assert carried  # each loop carries its stores or its sum
        body_reads = [op for op in body.get_operations() if PIECE_IN in op.name]
        body_pools = [op for op in body.get_operations() if op.type in ("MaxPool", "MaxPool3D")]
        waiting = [op.name for op in body_reads + body_pools if _ancestors(op) & carried]
        assert not waiting, waiting
        reads, pools = reads + len(body_reads), pools + len(body_pools)
    assert reads and pools  # the step's max pool gradient loops too
