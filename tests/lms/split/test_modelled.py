"""Split ops modelled in the analysis without being made (lms/split/modelled.py): the model
leaves the analysis it copies as it was, holds a piece's buffers where the made loop of pieces
does, keeps on the host what split ops alone read, drops the pools their pieces recompute, and
comes within a few per cent of the made step's simulated peak; `split="auto"` edits the step's
graph once, after the rounds.

Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging

import keras
import pytest
import tensorflow as tf
from split_steps import gradients_step

import lms
from lms.device.host_store import HostStore
from lms.graph.names import RECOMPUTE_SCOPE, SPLIT_SCOPE, SPLITS_MADE
from lms.graph.pool_reads import recompute_pool_reads
from lms.memory.lifetimes import footprints
from lms.memory.simulator import simulate
from lms.planning.planner import plan
from lms.split.chain import only_readers, split_decided
from lms.split.layouts import splittable
from lms.split.modelled import modelled
from lms.split.rewrite import piece_scope
from lms.tuning.analysis import analyze

pytestmark = pytest.mark.compat
MiB = 2**20


def _step(rows: int = 256):
    """Three convolutions, a max pool between them, batch 1 (split along the rows): the
    concrete function of its gradients' step with the pools recomputed, and the model (whose
    variables the function reads)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((rows, rows, 8), batch_size=1)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.MaxPooling2D(2)(x)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    x = keras.layers.Conv2D(8, 3, padding="same")(x)
    step = gradients_step(keras.Model(inputs, x))
    image = tf.random.stateless_normal((1, rows, rows, 8), seed=(1, 2))
    concrete = step.get_concrete_function(image)
    recompute_pool_reads(concrete.graph)
    return concrete, step


def _large(analysis, count: int) -> list:
    """The `count` running ops with the largest footprints that can be split, 8 pieces each."""
    found = []
    for footprint in sorted(footprints(analysis), key=lambda f: f.bytes, reverse=True):
        if footprint.name.startswith((f"{SPLIT_SCOPE}/", f"{RECOMPUTE_SCOPE}/")):
            continue
        if splittable(analysis.graph.get_operation_by_name(footprint.name)) is None:
            found.append((footprint.name, 8))
        if len(found) == count:
            break
    return found


def test_the_model_is_a_copy_with_each_split_op_as_keeps_pieces_and_assemble():
    concrete, _keep = _step()
    analysis = analyze(concrete.graph, kernels="onednn")
    before = [(op.name, op.type, list(op.inputs), list(op.outputs)) for op in analysis.ops]
    sizes = [t.bytes for t in analysis.tensors]
    decided = _large(analysis, 4)
    model = modelled(analysis, decided)
    assert [(op.name, op.type, list(op.inputs), list(op.outputs)) for op in analysis.ops] == before
    assert [t.bytes for t in analysis.tensors] == sizes  # the analysis copied is as it was
    names = {op.name: op for op in model.ops}
    for name, _ in decided:
        scope = piece_scope(name)
        assert name not in names and f"{scope}/keep_0" in names
        pieces, assemble = names[f"{scope}/lms_pieces"], names[f"{scope}/assemble"]
        assert pieces.temp_bytes > 0 and sum(pieces.temp_parts) == pieces.temp_bytes
        original = analysis.ops[[op.name for op in analysis.ops].index(name)]
        assert assemble.outputs == original.outputs
    # every tensor's readers read it (the consumer lists were moved with the inputs)
    for t, tensor in enumerate(model.tensors):
        for reader, position in tensor.consumers:
            assert model.ops[reader].inputs[position] == t
    # levels are a topological order
    for op in model.ops:
        for t in op.inputs:
            assert model.ops[model.tensors[t].producer].level < op.level


def test_what_split_ops_alone_read_stays_on_the_host_and_recomputed_pools_are_dropped():
    concrete, _keep = _step()
    analysis = analyze(concrete.graph, kernels="onednn")
    grads = [op.name for op in analysis.ops if op.type == "MaxPoolGrad"]
    pools = [op for op in analysis.ops if op.name.startswith(f"{RECOMPUTE_SCOPE}/") and op.runs]
    assert grads and pools
    # the max pool gradient and the ReluGrad that reads its output (nothing else reads it)
    relu_grad = next(
        analysis.ops[c].name
        for op in analysis.ops
        if op.name == grads[0]
        for t in op.outputs
        for c, _ in analysis.tensors[t].consumers
        if analysis.ops[c].type == "ReluGrad"
    )
    model = modelled(analysis, [(grads[0], 8), (relu_grad, 8)])
    names = {op.name: op for op in model.ops}
    assemble = names[f"{piece_scope(grads[0])}/assemble"]
    assert all(model.tensors[t].bytes == 0 for t in assemble.outputs)
    assert not any(op.runs for op in model.ops if op.name in {p.name for p in pools})


def _residual_step(rows: int = 128):
    """Four residual blocks of convolutions and batch norms (ResNet's), batch 1: the concrete
    function of its gradients' step (each block's incoming gradient is an AddN that a
    convolution's input and filter gradients both read, and a bias's gradient too)."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((rows, rows, 16), batch_size=1)
    x = inputs
    for _ in range(4):
        y = keras.layers.Conv2D(16, 3, padding="same")(x)
        y = keras.layers.BatchNormalization()(y)
        y = keras.layers.Activation("relu")(y)
        y = keras.layers.Conv2D(16, 3, padding="same")(y)
        y = keras.layers.BatchNormalization()(y)
        x = keras.layers.Activation("relu")(keras.layers.Add()([x, y]))
    step = gradients_step(keras.Model(inputs, x))
    image = tf.random.stateless_normal((1, rows, rows, 16), seed=(1, 2))
    return step.get_concrete_function(image), step


def _conv_gradients(analysis) -> list:
    """The convolutions' input and filter gradients, 8 pieces each."""
    kinds = ("Conv2DBackpropInput", "Conv2DBackpropFilter")
    return [(op.name, 8) for op in analysis.ops if op.type in kinds and op.runs]


def test_split_ops_share_one_keep_of_a_tensor_and_read_split_outputs_in_place():
    """As the made ops do (one host copy per tensor, lms/split/rewrite.py): a tensor that two
    split ops read is kept once, and a split op reading another's output reads its host
    array (the stored token), not the output put together on the device."""
    concrete, _keep = _residual_step()
    analysis = analyze(concrete.graph, kernels="onednn")
    decided = _conv_gradients(analysis)
    relu_grads = [op.name for op in analysis.ops if op.type == "ReluGrad" and op.runs]
    model = modelled(analysis, decided + [(name, 8) for name in relu_grads])
    keeps = [op for op in model.ops if op.type == "LmsKeep"]
    read = [t for op in keeps for t in op.inputs]
    assert read and len(read) == len(set(read)), "a tensor kept twice"
    pieces = {op.name: op for op in model.ops if op.type == "LmsPieces"}
    # an input gradient's incoming gradient, read by its filter gradient too: one keep
    shared = [
        op
        for op in pieces.values()
        if any(
            model.ops[model.tensors[t].producer].name.split("/keep_")[0] not in op.name
            for t in op.inputs
            if model.ops[model.tensors[t].producer].type == "LmsKeep"
        )
    ]
    assert shared, "no pieces read another split op's keep"
    for op in keeps:  # what a keep reads is never an output put together on the device
        for t in op.inputs:
            assert model.ops[model.tensors[t].producer].type != "LmsAssemble", op.name
    for t, tensor in enumerate(model.tensors):
        for reader, position in tensor.consumers:
            assert model.ops[reader].inputs[position] == t


@pytest.mark.kernels
def test_the_modelled_plan_with_the_enforced_order_is_near_the_made_one():
    """The convolutions' gradients of four residual blocks split, modelled and made as they
    run (in chains, with their only readers), planned with every swap the enforced order
    allows (ordering=1): the simulated peaks within 5 % (the model up to 10 % above with Keras
    2's fused batch norms). Before the model kept a tensor once and read split outputs in
    place, its plan held the blocks' incoming gradients until their filter gradients' keeps:
    11.1 MiB modelled, 4.1 made (ResNet50 1856² b1: 732 and 333)."""
    kernels = lms.cpu_kernels()
    concrete, _keep = _residual_step()
    analysis = analyze(concrete.graph, kernels=kernels)
    decided = [(n, k, "") for n, k in _conv_gradients(analysis)]
    decided += only_readers(concrete.graph, decided)
    model = modelled(analysis, [(n, k) for n, k, *_ in decided])
    split_decided(concrete.graph, decided, HostStore().pieces())
    made = analyze(concrete.graph, kernels=kernels)
    everything = lms.Parameters(1, 1, 0, sync_mode=0, ordering=1)
    peaks = [simulate(a, plan(a, everything)).peak_bytes for a in (model, made)]
    # (Keras 2, TF 2.14: fused batch norms, split as lms/split/norm.py makes them: 8 % above)
    assert 0.95 * peaks[1] <= peaks[0] <= 1.1 * peaks[1], [p / MiB for p in peaks]


@pytest.mark.kernels
def test_the_modelled_peak_is_near_the_made_steps():
    """The four largest ops of the step split into 8 pieces each, modelled and made (every op
    alone): with oneDNN's kernels the simulated peaks without swaps within 5 % (Keras 3; the
    model 12 % above with Keras 2, TF 2.14) and each modelled loop of pieces holding what the
    made one does within 15 %. With Eigen's the loops agree within
    20 % (filter gradients: 28.6-32.3 MiB modelled, 27.0-30.7 made), but the model is short of
    the made step's peak (42.3 MiB against 57.3): it leaves out the pieces made one by one at
    the borders, whose gradients' 30 MiB working sets are allocated beside the op before them.
    The rounds then go on from the plan made (test below): checked here that it is short, not
    over, so that it never splits more than the made step needs."""
    kernels = lms.cpu_kernels()
    concrete, _keep = _step()
    analysis = analyze(concrete.graph, kernels=kernels)
    decided = _large(analysis, 4)
    model = modelled(analysis, decided)
    split_decided(concrete.graph, [(n, k, "") for n, k in decided], HostStore().pieces(), False)
    made = analyze(concrete.graph, kernels=kernels)
    peaks = simulate(model).peak_bytes, simulate(made).peak_bytes
    if kernels == "onednn":
        assert 0.95 * peaks[1] <= peaks[0] <= 1.15 * peaks[1], [p / MiB for p in peaks]
    else:
        assert peaks[0] <= 1.05 * peaks[1], [p / MiB for p in peaks]
    held = {op.name: op.temp_bytes for op in made.ops if op.type in ("While", "StatelessWhile")}
    compared = []
    for name, _ in decided:
        loop = f"{piece_scope(name)}/lms_pieces"
        modelled_bytes = next(op.temp_bytes for op in model.ops if op.name == loop)
        made_bytes = max(b for n, b in held.items() if n.startswith(f"{piece_scope(name)}/"))
        compared.append((name, modelled_bytes, made_bytes))
    tolerance = 0.15 if kernels == "onednn" else 0.2
    assert all(abs(m - b) <= tolerance * b for _, m, b in compared), compared


@pytest.mark.kernels
def test_auto_split_edits_the_graph_once_after_rounds_decided_on_the_model(caplog):
    """A step that fits only split (in 64 MiB with oneDNN's kernels, 96 with Eigen's, whose
    filter gradients hold 30 MiB working sets): the rounds are tuned on the model, the ops are
    made once (no round makes pieces, no fresh trace for the chains: the graph says so), and
    the plan fits its budget."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((512, 512, 8), batch_size=1)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Conv2D(8, 3, padding="same")(x))
    step = gradients_step(model)
    spec = tf.TensorSpec((1, 512, 512, 8))
    memory = "96MiB" if lms.cpu_kernels() == "eigen" else "64MiB"
    assert not lms.LMS(device_memory=memory, split="off").plan_only(step, spec).fits
    planner = lms.LMS(device_memory=memory, calibration_steps=0)
    with caplog.at_level(logging.INFO, logger="lms"):
        planned = planner.pipeline.plan(step, (spec,))
    messages = [r.getMessage() for r in caplog.records]
    assert any("as the rounds decided on the model" in m for m in messages), messages
    if lms.cpu_kernels() == "onednn":
        assert not any(m.startswith("split ") for m in messages)  # no round made its pieces
        assert planned.splits and getattr(planned.concrete.graph, SPLITS_MADE, False)
    else:  # the model is short of the made step here (below): rounds go on from what was made
        assert planned.splits
    assert planned.tuned.simulation.peak_bytes <= planned.budget_bytes


@pytest.mark.kernels
def test_the_modelled_host_arrays_are_near_the_made_steps():
    """The host arrays the model holds (a kept input from its keep to its last pieces, a
    stored output from its pieces to its assemble and its in-place readers) against the made
    step's, split ops alone and in chains, with no swap and with every swap the enforced order
    allows: within 10 %. The model counts what a chain keeps on the device as stored, so it is
    not under the chained step's by more than that. Fails with the model's host arrays left
    out (0 bytes where the made steps hold about 11 MiB). Not with Keras 2's fused batch norms,
    split in two passes (lms/split/norm.py), whose host arrays the model is short of (11.5 MiB
    modelled, 19.9 made): a plan only reported is then made (test below)."""
    if keras.__version__.startswith("2."):
        pytest.skip("Keras 2: fused batch norms, whose split the model's host arrays are short of")
    kernels = lms.cpu_kernels()
    everything = lms.Parameters(1, 1, 0, sync_mode=0, ordering=1)
    for chained in (False, True):
        concrete, _keep = _residual_step()
        analysis = analyze(concrete.graph, kernels=kernels)
        decided = [(n, k, "") for n, k in _conv_gradients(analysis)]
        decided += only_readers(concrete.graph, decided)
        model = modelled(analysis, [(n, k) for n, k, *_ in decided])
        split_decided(concrete.graph, decided, HostStore().pieces(), chained)
        made = analyze(concrete.graph, kernels=kernels)
        for plan_of in (lambda a: None, lambda a: plan(a, everything)):
            hosts = [simulate(a, plan_of(a)).host_peak_bytes for a in (model, made)]
            assert hosts[1] > 4 * MiB
            assert 0.9 * hosts[1] <= hosts[0] <= 1.1 * hosts[1], (chained, hosts)


@pytest.mark.kernels
def test_a_plan_only_reported_is_the_models_and_makes_no_op(caplog):
    """`plan_only(made=False)` of a step that fits only split, with oneDNN's kernels: the
    splits the made plan has (ops, pieces, chains), nothing made in the step's graph, its
    device peak within 5 % and its host peak within 10 % of the made plan's (`prepare` makes
    it, and `plan_only` by default, which says it is not modelled; 15 % with Keras 2, TF
    2.14.1: 50.4 MB modelled, 58.7 made, the next op's outputs in flight beside the peak's op
    in the made step alone). With Eigen's, whose border pieces the model is short of (58.7 MB
    modelled, 82.2 made here), the plan reported is the made one."""
    keras.utils.set_random_seed(0)
    inputs = keras.Input((512, 512, 8), batch_size=1)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(inputs)
    x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
    step = gradients_step(keras.Model(inputs, keras.layers.Conv2D(8, 3, padding="same")(x)))
    spec = tf.TensorSpec((1, 512, 512, 8))
    memory = "96MiB" if lms.cpu_kernels() == "eigen" else "64MiB"
    planner = lms.LMS(device_memory=memory, calibration_steps=0)
    with caplog.at_level(logging.INFO, logger="lms"):
        report = planner.plan_only(step, spec, made=False)
    if lms.cpu_kernels() == "eigen":
        assert report.fits and report.splits and not report.splits_modelled
        return
    assert report.fits and report.splits and report.splits_modelled
    assert any("not made (a plan only reported)" in r.getMessage() for r in caplog.records)
    graph = step.get_concrete_function(spec).graph
    assert not [op for op in graph.get_operations() if op.name.startswith(f"{SPLIT_SCOPE}/")]
    made = lms.LMS(device_memory=memory, calibration_steps=0).pipeline.plan(step, (spec,))
    made_report = lms.LMS(device_memory=memory, calibration_steps=0).plan_only(step, spec)
    assert made_report.fits and not made_report.splits_modelled  # the default: made
    assert getattr(made.concrete.graph, SPLITS_MADE, False)
    key = ("op", "pieces", "axis", "chained_after", "side")
    assert [tuple(s[k] for k in key) for s in report.splits] == [
        tuple(getattr(s, k) for k in key) for s in made.splits
    ]
    peak, host = made.tuned.simulation.peak_bytes, made.tuned.simulation.host_peak_bytes
    below = 0.85 if keras.__version__.startswith("2.") else 0.95
    assert below * peak <= report.peak_bytes_with_lms <= 1.05 * peak
    assert 0.9 * host <= report.host_peak_bytes <= 1.1 * host
