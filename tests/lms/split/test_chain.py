"""lms/split/chain.py: consecutive split ops run piece by piece through their chain compute the
same outputs and gradients as the step whole, read fewer bytes from the host than the same ops
split alone, free every host array, and never make a chain wait for itself (a forward op in its
own gradient's chain; two chains each reading the other's output), and compute exactly the rows
their sizing (lms/split/chain_size.py) counts, none a piece larger than one op's alone. Through
both mechanisms' pieces: the emulated device's host store and TensorFlow's copies (a GPU's, both
devices the CPU here). Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import collections

import numpy as np
import pytest
import tensorflow as tf
from lms_cases import workload_case

import lms
from lms import _tf_private
from lms.device.copies import DevicePieces
from lms.device.host_store import HostStore
from lms.plan_request import Request
from lms.split import chain_run as chain_module
from lms.split.chain import chains, only_readers, split_decided
from lms.split.chain_size import chain_spans, rows_per_piece
from lms.split.halo import RowLayout
from lms.split.layouts import splittable
from lms.split.pieces import Layout
from lms.split.rewrite import running_ops
from lms.split.views import ReductionLayout, ShiftLayout

pytestmark = pytest.mark.compat


def _step_python(x, k1, k2):
    """conv -> ReLU -> max pool (3x3 / 2, halos overlapping) -> conv -> ReLU -> x2, a squared
    loss (its gradient's Tile reads the forward's shape), and the gradients."""
    with tf.GradientTape() as tape:
        tape.watch([x, k1, k2])
        y = tf.nn.relu(tf.nn.conv2d(x, k1, 1, "SAME"))
        y = tf.nn.max_pool2d(y, 3, 2, "SAME")
        y = tf.nn.relu(tf.nn.conv2d(y, k2, 1, "SAME")) * 2.0
        loss = tf.reduce_sum(y * y)
    return [y, *tape.gradient(loss, [x, k1, k2])]


def _step(*args):
    """The step's concrete function, traced afresh (splitting edits the graph in place)."""
    return tf.function(_step_python).get_concrete_function(*args)


def _inputs(batch: int, rows: int = 29, columns: int = 17, channels=(3, 4, 5)):
    c0, c1, c2 = channels
    x = tf.random.stateless_normal([batch, rows, columns, c0], seed=(1, 2))
    k1 = tf.random.stateless_normal([3, 3, c0, c1], seed=(3, 4))
    k2 = tf.random.stateless_normal([3, 3, c1, c2], seed=(5, 6))
    return x, k1, k2


def _every_splittable(graph, pieces: int) -> list:
    running = running_ops(graph)
    ops = graph.get_operations()
    return [(op.name, pieces, "") for op in ops if op in running and splittable(op) is None]


def _split_and_run(batch: int, pieces: int, io, chained: bool):
    args = _inputs(batch)
    concrete = _step(*args)
    splits = split_decided(concrete.graph, _every_splittable(concrete.graph, pieces), io, chained)
    got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(*args)
    return splits, [t.numpy() for t in got]


def _assert_same(got, want):
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5 * np.abs(w).max())


@pytest.mark.parametrize("pieces", [2, 5, 29])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_chain_computes_the_same_and_frees_every_host_array(batch, pieces):
    """Along the rows with halos (batch 1: a pool's piece computes the convolution's rows its
    window needs, twice where two pieces share them) and along the batch: the same outputs and
    gradients to 1e-5, the host store empty after the step, forward and backward chains made."""
    want = [t.numpy() for t in _step(*_inputs(batch))(*_inputs(batch))]
    store = HostStore()
    splits, got = _split_and_run(batch, pieces, store.pieces(), chained=True)
    _assert_same(got, want)
    assert store.held_bytes == 0
    after = {s.op_type: s.chained_after for s in splits if s.chained_after}
    assert {"Relu", "MaxPoolGrad"} <= set(after)
    if batch > 1 or pieces == 2:  # in smaller pieces along the rows, the pool's halo cuts chains
        assert {"Relu", "MaxPool", "MaxPoolGrad", "Conv2DBackpropInput"} <= set(after)


def test_a_chain_reads_fewer_bytes_from_the_host_than_its_ops_alone():
    """What passes between chained ops stays on the device: the host store serves and takes
    fewer bytes than with each op split alone, on the same step and pieces."""
    moved = {}
    for chained in (False, True):
        store = HostStore()
        _split_and_run(1, 2, store.pieces(), chained)
        traffic = store.take_traffic()
        moved[chained] = (traffic.in_bytes, traffic.out_bytes)
    # (in two pieces each along the rows, the chains whole: what passes on the device, less
    # the halo rows the chain's pieces compute twice)
    assert moved[True][0] < 0.8 * moved[False][0], moved
    assert moved[True][1] < 0.8 * moved[False][1], moved


def test_no_chain_waits_for_itself():
    """A forward op is not chained into its own gradient (the gradient's incoming gradient
    depends on it), and of two chains that would each read the other's output (the forward's
    last Mul reads the loss gradient's Tile, whose Mul reads the forward's output) one link
    is cut: the step above runs at all only so."""
    concrete = _step(*_inputs(1))
    graph = concrete.graph
    found = chains(graph, _every_splittable(graph, 3))
    types = [[graph.get_operation_by_name(name).type for name, *_ in c] for c in found]
    for chain in types:
        for before, after in zip(chain, chain[1:], strict=False):
            assert (before, after) not in {("MaxPool", "MaxPoolGrad"), ("Relu", "ReluGrad")}
    tiles = [c for c, t in zip(found, types, strict=True) if "Tile" in t]
    assert tiles and all(len(c) == 1 or c[0][0].endswith("Tile") for c in tiles)
    assert max(len(c) for c in found) >= 5  # conv, ReLU, pool, conv, ReLU, ...
    assert sorted(n for c in found for n, *_ in c) == sorted(
        n for n, *_ in _every_splittable(graph, 3)
    )


@pytest.mark.parametrize("batch", [1, 3])
def test_the_gpu_paths_chains_compute_the_same_on_the_cpu(batch):
    """TensorFlow's copies (DevicePieces: a GPU's host slices and concats, both devices the CPU
    here) through chains: the same outputs and gradients."""
    want = [t.numpy() for t in _step(*_inputs(batch))(*_inputs(batch))]
    splits, got = _split_and_run(batch, 3, DevicePieces(), chained=True)
    _assert_same(got, want)
    assert sum(1 for s in splits if s.chained_after) >= 5


def _biased_step_python(x, k1, b1, k2, b2):
    """conv + bias -> ReLU -> conv + bias -> ReLU, a squared loss, and the gradients: each
    ReLU's gradient is read by a filter's gradient, a bias's and (the first conv's input
    gradient) an input gradient."""
    with tf.GradientTape() as tape:
        tape.watch([x, k1, b1, k2, b2])
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k1, 1, "SAME"), b1))
        y = tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(y, k2, 1, "SAME"), b2))
        loss = tf.reduce_sum(y * y)
    return [y, *tape.gradient(loss, [x, k1, b1, k2, b2])]


def _biased_inputs(batch: int):
    x, k1, k2 = _inputs(batch)
    b1 = tf.random.stateless_normal([4], seed=(7, 8))
    b2 = tf.random.stateless_normal([5], seed=(9, 10))
    return x, k1, b1, k2, b2


def _split_biased(batch: int, pieces: int, io, sides: bool, monkeypatch):
    """The biased step with every op split (chained), side ops as chain.py makes them or, not
    `sides`, none (`side_position` gives none): (splits, outputs)."""
    from lms.split import chain as chain_decisions

    with monkeypatch.context() as patched:
        if not sides:
            patched.setattr(chain_decisions, "side_position", lambda *args: None)
        args = _biased_inputs(batch)
        concrete = tf.function(_biased_step_python).get_concrete_function(*args)
        decided = _every_splittable(concrete.graph, pieces)
        splits = split_decided(concrete.graph, decided, io, chained=True)
        got = _tf_private.concrete_function_from_graph(concrete, concrete.graph)(*args)
    return splits, [t.numpy() for t in got]


@pytest.mark.parametrize("pieces", [2, 5])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_sum_over_a_members_rows_runs_in_its_chains_pieces(batch, pieces, monkeypatch):
    """A filter's and a bias's gradient reading a ReLU gradient's rows sum over them in the
    ReLU gradient's chain (side ops, chain.py): the same outputs and gradients, no host array
    left, and fewer bytes moved each way than with each in pieces of its own reading the rows
    back from the host; through TensorFlow's copies (a GPU's) too."""
    args = _biased_inputs(batch)
    want = [t.numpy() for t in tf.function(_biased_step_python)(*args)]
    moved = {}
    for sides in (True, False):
        store = HostStore()
        splits, got = _split_biased(batch, pieces, store.pieces(), sides, monkeypatch)
        _assert_same(got, want)
        assert store.held_bytes == 0
        traffic = store.take_traffic()
        moved[sides] = (traffic.in_bytes, traffic.out_bytes)
        after = {(s.op_type, s.chained_after.rsplit("/", 1)[-1]) for s in splits}
        summed = {(t, a) for t, a in after if t in ("Conv2DBackpropFilter", "BiasAddGrad")}
        if sides:
            assert {t for t, a in summed if a.startswith("ReluGrad")} == {
                "Conv2DBackpropFilter",
                "BiasAddGrad",
            }, splits
        else:
            assert all(not a for _, a in summed), splits
    assert moved[True][0] < moved[False][0] and moved[True][1] < moved[False][1], moved
    splits, got = _split_biased(batch, pieces, DevicePieces(), True, monkeypatch)
    _assert_same(got, want)


def test_a_bias_gradient_not_decided_is_split_as_a_side_op():
    """`only_readers` adds a reader that sums over a decided op's rows and reads nothing else
    (a bias's gradient of a split ReLU gradient), in as many pieces, whatever else reads that
    op."""
    args = _biased_inputs(1)
    graph = tf.function(_biased_step_python).get_concrete_function(*args).graph
    relu_grads = [op for op in graph.get_operations() if op.type == "ReluGrad"]
    added = only_readers(graph, [(op.name, 3, "") for op in relu_grads])
    types = collections.Counter(graph.get_operation_by_name(n).type for n, *_ in added)
    # a filter gradient not split is not added: its input would have to go to the host
    assert types["BiasAddGrad"] == 2 and types["Conv2DBackpropFilter"] == 0, added
    assert all(pieces == 3 for _, pieces, _ in added)


def test_a_split_googlenet_step_with_side_ops_runs_in_its_enforced_order(caplog):
    """GoogLeNet 1024² b1 in 150 MiB, split in chains with side ops, runs in the op order its
    plan enforces: with oneDNN's kernels, a BiasAddGrad beside a filter gradient on the same
    rows was fused with it across that order's control edges (a cycle: TensorFlow refused the
    order and the step ran in its own), until chain_run.py made such a bias gradient a Sum
    and chain.py put no side beside a BiasAddGrad member. (With Eigen's kernels nothing is
    fused: the cycle cannot arise.)"""
    case = workload_case("googlenet", 1024, 1)
    planner = lms.LMS(device_memory="150MiB", calibration_steps=0)
    step = planner.wrap(case.step)
    with caplog.at_level("WARNING", logger="lms"):
        float(step(case.images, case.labels))
    assert "made a cycle" not in caplog.text
    sides = [s for s in planner.report.splits if s["op_type"] == "Conv2DBackpropFilter"]
    assert any(s.get("chained_after") for s in sides), planner.report.splits


def test_split_chains_option_plans_the_same_splits_chained_or_alone():
    """LMS(split={...}) chains the ops it splits by default and not with split_chains=False;
    both steps compute what the plain step computes."""
    args = _inputs(1)
    want = [t.numpy() for t in _step(*args)(*args)]
    wanted = {"Conv2D": 3, "Relu": 3, "MaxPool": 3, "ReluGrad": 3, "MaxPoolGrad": 3}
    for chained in (True, False):
        planner = lms.LMS(device_memory="1GiB", split=wanted, split_chains=chained)
        got = planner.wrap(tf.function(_step_python))(*args)
        _assert_same([t.numpy() for t in got], want)
        links = [s for s in planner.report.splits if s.get("chained_after")]
        assert bool(links) == chained, planner.report.splits
    with pytest.raises(lms.ParameterError, match="split_chains"):
        lms.LMS(device_memory="1GiB", split_chains="yes")


def test_the_step_time_model_counts_the_bytes_the_pieces_move():
    """`lms.swap_graph` (what `inv project` replays on a link) counts each piece copy that runs
    with the bytes it moves: the host store's own count of a step, chained or alone."""
    for chained in (False, True):
        store = HostStore()
        args = _inputs(1)
        concrete = _step(*args)
        decided = _every_splittable(concrete.graph, 4)
        split_decided(concrete.graph, decided, store.pieces(), chained)
        moved = lms.swap_graph(concrete.graph).bytes_per_direction
        _tf_private.concrete_function_from_graph(concrete, concrete.graph)(*args)
        traffic = store.take_traffic()
        assert (moved["in"], moved["out"]) == (traffic.in_bytes, traffic.out_bytes), chained


def test_auto_split_makes_its_splits_again_in_chains_when_that_plan_fits():
    """split="auto" decides the splits in rounds with each op alone, then makes them again in
    chains on a fresh trace and keeps that plan when it fits: GoogLeNet 1024² b1 in 150 MiB
    plans a chained step that fits, splitting what the plan with each op alone
    (`split_chains=False`) splits and the only readers it chains to."""
    case = workload_case("googlenet", 1024, 1)
    args = (case.step, case.images, case.labels)
    reports = {}
    for chained in (True, False):
        planner = lms.LMS(device_memory="150MiB", calibration_steps=0, split_chains=chained)
        reports[chained] = planner.plan_only(*args)
    assert reports[True].fits and reports[True].peak_bytes_with_lms <= reports[True].budget_bytes
    links = [s for s in reports[True].splits if s.get("chained_after")]
    assert links and not [s for s in reports[False].splits if s.get("chained_after")]
    assert {s["op"] for s in reports[False].splits} <= {s["op"] for s in reports[True].splits}


@pytest.mark.parametrize(("memory", "chained"), [("700KiB", True), ("1500KiB", False)])
def test_a_closest_plan_is_chained_too_and_every_host_array_is_read(memory, chained):
    """When nothing fits even split, the closest plan (kept for the closed loop to measure) is
    made again in chains as a plan that fits is (it was left with each op alone, moving every
    intermediate through the host), when that plan comes no farther from fitting. And no
    host array is left unread after a step: a max pool gradient whose pieces pool their own
    rows leaves its whole recomputed pool unread, so neither is that pool split nor is a host
    copy of its input kept for it (GoogLeNet 1024² in 150 MiB kept 64 MiB a step for it)."""
    args = _inputs(1, 192, 64, (8, 16, 16))
    want = [t.numpy() for t in _step(*args)(*args)]
    planner = lms.LMS(device_memory=memory, calibration_steps=0, split_chains=chained)
    request = Request(keep_closest=True)
    prepared = planner.pipeline.prepare(tf.function(_step_python), args, request)
    splits = prepared.report.splits
    assert splits and not [s for s in splits if s["op"].startswith("lms_pool/")]
    assert bool([s for s in splits if s.get("chained_after")]) == chained
    if chained:
        assert not prepared.report.fits
    for _ in range(2):
        _assert_same([t.numpy() for t in prepared.callable(*args)], want)
        assert planner.store.clear() == (0, 0)


def _record_pieces(monkeypatch) -> dict:
    """id(layout) -> the [start, stop) of each piece made by it (each layout kept alive, so
    that no id is reused: a side op's layout is not a sized member's)."""
    calls, alive = collections.defaultdict(list), []
    for cls in (Layout, RowLayout, ShiftLayout, ReductionLayout):

        def piece(self, op, start, stop, read, _real=cls.piece):
            calls[id(self)].append((start, stop))
            alive.append(self)
            return _real(self, op, start, stop, read)

        monkeypatch.setattr(cls, "piece", piece)
    return calls


def _record_sizing(monkeypatch) -> list:
    """(members, (pieces, cut)) of each chain sized."""
    sized, real = [], chain_module.chain_pieces

    def chain_pieces(members):
        found = real(members)
        sized.append((members, found))
        return found

    monkeypatch.setattr(chain_module, "chain_pieces", chain_pieces)
    return sized


def _record_bounds(monkeypatch) -> list:
    """The bounds each chain's pieces were cut by (lms/split/looped.py may take fewer rows per
    piece than its sizing asked, so that alike pieces loop: never more)."""
    made, real = [], chain_module.looped_bounds

    def looped_bounds(*args):
        found = real(*args)
        made.append(found[0])
        return found

    monkeypatch.setattr(chain_module, "looped_bounds", looped_bounds)
    return made


@pytest.mark.parametrize("pieces", [2, 5, 29])
@pytest.mark.parametrize("batch", [1, 3])
def test_a_chains_pieces_compute_the_rows_counted_and_none_is_larger_than_one_alone(
    monkeypatch, batch, pieces
):
    calls, sized = _record_pieces(monkeypatch), _record_sizing(monkeypatch)
    cuts = _record_bounds(monkeypatch)
    _split_and_run(batch, pieces, HostStore().pieces(), chained=True)
    made = [(members, count) for members, (count, cut) in sized if cut is None]
    assert any(len(members) >= 3 for members, _ in made) and len(cuts) == len(made)
    for (members, count), bounds in zip(made, cuts, strict=True):
        rows = rows_per_piece(members, count)
        spans = chain_spans(members, bounds)  # the rows each piece computes, made or looped
        alone = max(m.piece_bytes(-(-m.layout.length // m.pieces)) for m in members)
        for k, (member, most) in enumerate(zip(members, rows, strict=True)):
            computed = [stop - start for start, stop in calls[id(member.layout)]]
            assert max(computed) == max(piece[k].hi - piece[k].lo for piece in spans) <= most
            assert member.piece_bytes(most) <= alone
    cut = [members for members, (_, cut) in sized if cut is not None]
    # along the rows, in pieces of a few rows, the halos of a pool and a convolution are wider
    # than the first ops' pieces alone: those chains are cut (along the batch: no halo)
    assert bool(cut) == (batch == 1 and pieces > 2), [len(m) for m in cut]


def test_a_halo_wider_than_a_piece_alone_cuts_the_chain_where_it_is_over_the_most():
    """conv -> ReLU -> pool (3 / 2) -> conv in pieces of one row: the pool's piece reads 3 rows
    of the ReLU, each row of the second convolution 3 of the pool: no count of pieces keeps
    the first ops' pieces to one row, so the chain is cut, and what is left still computes the
    same (test_chain.py checks the values)."""
    x, *_ = _inputs(1)
    assert x.shape[1] == 29
    splits, _ = _split_and_run(1, 29, HostStore().pieces(), chained=True)
    heads = [s for s in splits if not s.chained_after]
    linked = [s for s in splits if s.chained_after]
    assert linked and len(heads) > 1
    assert all(s.pieces <= 29 for s in splits)
