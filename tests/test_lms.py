"""lms on real TensorFlow graphs: analysis, plans, simulation, tuning, rewrite equivalence, and the
measured peak on the emulated device. Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

import lms
from suite import data, training
from suite.workloads import WORKLOADS, build_workload

pytestmark = pytest.mark.compat
HERE = Path(__file__).resolve().parent


def small_cnn(resolution=96, batch=4, layers=5, precision="fp32"):
    policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy({"fp32": "float32", "fp16": "mixed_float16"}[precision])
    try:
        inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
        x = inputs
        for _ in range(layers):
            x = keras.layers.Conv2D(16, 3, padding="same", activation="relu")(x)
        x = keras.layers.GlobalAveragePooling2D()(x)
        model = keras.Model(inputs, keras.layers.Dense(10)(x))
    finally:
        keras.mixed_precision.set_global_policy(policy)
    images = tf.random.stateless_uniform((batch, resolution, resolution, 3), seed=(1, 2))
    labels = tf.random.stateless_uniform((batch,), (3, 4), maxval=10, dtype=tf.int32)
    from suite.workloads.losses import classification

    return model, classification, images, labels


class Case:
    """A model with its step and one batch; restores the initial state between runs."""

    def __init__(self, model, loss_fn, images, labels, precision="fp32"):
        self.model, self.images, self.labels = model, images, labels
        self.precision, self.loss_fn = precision, loss_fn
        # a small step: the runs must stay comparable, not overfit one batch in three steps
        self.optimizer = keras.optimizers.SGD(learning_rate=1e-4, momentum=0.9)
        self.step = training.make_train_step(model, loss_fn, self.optimizer, precision)
        self.initial = [v.numpy() for v in self._state()]

    def _state(self):
        return list(self.model.variables) + list(self.optimizer.variables)

    def run(self, function, steps=3):
        for variable, value in zip(self._state(), self.initial, strict=True):
            variable.assign(value)
        losses = [float(function(self.images, self.labels)) for _ in range(steps)]
        return losses, [v.numpy() for v in self.model.trainable_variables]


def workload_case(name, resolution, batch=1, precision="fp32"):
    model, loss_fn = build_workload(name, resolution, batch, precision)
    if name == "deeplabv3plus":
        # Keras 2's dropout draws from a stream per traced function: the plain and the rewritten
        # step would drop different units. No dropout, so both compute the same function.
        model.get_layer("aspp_dropout").rate = 0.0
    info = WORKLOADS[name]
    images, labels = data.synthetic_batch(info, resolution, batch, info.default_classes)
    return Case(model, loss_fn, images, labels, precision)


def applications_case(name, resolution, batch=2):
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
    model = getattr(keras.applications, name)(weights=None, input_tensor=inputs, classes=10)
    images = tf.random.stateless_uniform((batch, resolution, resolution, 3), seed=(5, 6))
    labels = tf.random.stateless_uniform((batch,), (7, 8), maxval=10, dtype=tf.int32)

    def loss_fn(y, p):
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p))

    return Case(model, loss_fn, images, labels)


@pytest.fixture
def exact_arithmetic():
    """Grappler's arithmetic optimizer off for the test (restored after)."""
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    yield
    tf.config.optimizer.set_experimental_options(
        {"arithmetic_optimization": saved.get("arithmetic_optimization", True)}
    )


def assert_same_training(case, function):
    """Equal to float tolerance. Not bit-equal: a swap-out is one more reader of a tensor, which
    stops Grappler from fusing its producer with its consumer (e.g. convolution + bias + ReLU
    into one oneDNN kernel), and fused and unfused kernels round differently; fp16 more so."""
    rtol = 1e-3 if case.precision == "fp16" else 1e-4
    expected_losses, expected_weights = case.run(case.step)
    losses, weights = case.run(function)
    np.testing.assert_allclose(losses, expected_losses, rtol=rtol)
    for got, want in zip(weights, expected_weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=rtol * 10, atol=rtol / 10)


def aggressive():
    """Swap everything that can be swapped: the strongest test of the rewrite."""
    return lms.LMS(device_memory="1TiB", swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)


def force_plan(planner, case):
    """Rewrite with fixed parameters even though the budget would not need LMS."""
    concrete = case.step.get_concrete_function(case.images, case.labels)
    analysis = lms.analyze(concrete.graph)
    plan = lms.plan(analysis, planner.parameters)
    from lms.rewriter import rewrite

    store = lms.HostStore()
    rewritten = rewrite(concrete, analysis, plan, store)
    rewritten.lms_store = store
    return rewritten, analysis, plan, concrete


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: Case(*small_cnn()), id="cnn-fp32"),
        pytest.param(lambda: Case(*small_cnn(precision="fp16"), precision="fp16"), id="cnn-fp16"),
        pytest.param(lambda: workload_case("googlenet", 64, 2), id="googlenet"),
        pytest.param(lambda: workload_case("googlenet", 64, 2, "fp16"), id="googlenet-fp16"),
        pytest.param(lambda: workload_case("unet3d", 16), id="unet3d"),
        pytest.param(lambda: applications_case("VGG16", 64), id="vgg16"),
    ],
)
def test_rewritten_step_trains_like_the_original(make):
    case = make()
    rewritten, analysis, plan, _ = force_plan(aggressive(), case)
    assert plan.swap_count > 5
    assert_same_training(case, rewritten)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: workload_case("deeplabv3plus", 96, 2), id="deeplabv3plus"),
        pytest.param(lambda: workload_case("resnet50", 96, 4), id="resnet50"),
        pytest.param(lambda: applications_case("MobileNetV2", 96, 4), id="mobilenetv2"),
        pytest.param(lambda: applications_case("DenseNet121", 64), id="densenet121"),
    ],
)
def test_rewritten_step_computes_the_same_gradients_with_batch_norm(make, exact_arithmetic):
    """Batch norm over the few values of a test-sized batch is ill-conditioned: scaling ResNet50's
    input by one ulp moves its gradients by up to 45 %. Grappler's arithmetic optimizer fuses
    differently once a swap-out reads a tensor, which changes last bits, which such a model
    amplifies. With that optimizer off in both runs, the rewritten step must give the same loss
    and gradients to float tolerance."""
    case = make()
    model = case.model

    @tf.function
    def gradients(images, labels):
        with tf.GradientTape() as tape:
            loss = case.loss_fn(labels, model(images, training=True))
        return [loss, *tape.gradient(loss, model.trainable_variables)]

    case.run(lambda *_: tf.constant(0.0), steps=0)  # restore the initial state
    expected = [t.numpy() for t in gradients(case.images, case.labels)]
    concrete = gradients.get_concrete_function(case.images, case.labels)
    analysis = lms.analyze(concrete.graph)
    plan = lms.plan(analysis, aggressive().parameters)
    assert plan.swap_count > 20
    from lms.rewriter import rewrite

    rewritten = rewrite(concrete, analysis, plan, lms.HostStore())
    case.run(lambda *_: tf.constant(0.0), steps=0)
    got = [t.numpy() for t in rewritten(case.images, case.labels)]
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-5)
    scale = max(float(np.abs(g).max()) for g in expected[1:])
    for g, e in zip(got[1:], expected[1:], strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-5 * scale)


def test_swap_ops_sit_where_the_plan_put_them():
    case = Case(*small_cnn())
    rewritten, analysis, plan, concrete = force_plan(aggressive(), case)
    store = rewritten.lms_store
    float(rewritten(case.images, case.labels))
    assert store.held_bytes == 0  # every swapped tensor freed after its last swap-in
    ops = {op.name: op for op in concrete.graph.get_operations()}
    swap_outs = [op for op in ops.values() if "lms_swapout" in op.name]
    swap_ins = [op for op in ops.values() if op.type == "PyFunc" and "lms_swapin" in op.name]
    assert len(swap_outs) == plan.swap_count and len(swap_ins) == plan.swap_in_count
    for swap in plan.swaps:
        tensor = analysis.tensors[swap.tensor]
        for swap_in in swap.swap_ins:
            trigger = analysis.ops[swap_in.trigger].name
            for consumer, position in swap_in.consumers:
                reader = ops[analysis.ops[consumer].name].inputs[position].op
                if reader.type == "EnsureShape":  # the swap-in's static shape, for Grappler
                    reader = reader.inputs[0].op
                assert "lms_swapin" in reader.name, (tensor.name, reader.name)
                assert trigger in [c.name for c in reader.control_inputs]
                # the swap-in reads the handle its tensor's swap-out produced
                source = reader.inputs[0].op
                assert "lms_swapout" in source.name and source.inputs[0].name == tensor.name


def test_analysis_sizes_levels_and_logged_messages(caplog):
    model, loss_fn, images, labels = small_cnn(resolution=32, batch=2, layers=2, precision="fp16")
    case = Case(model, loss_fn, images, labels, "fp16")
    graph = case.step.get_concrete_function(images, labels).graph
    with caplog.at_level(logging.INFO, logger="lms"):
        analysis = lms.analyze(graph)
    messages = "\n".join(r.getMessage() for r in caplog.records)
    assert f"The graph has {len(analysis.ops)} vertices and {analysis.edges} edges" in messages
    assert "MiB of learning parameters" in messages and "The largest operation is" in messages
    assert f"The graph has {len(analysis.levels)} levels" in messages
    conv = next(analysis.tensors[op.outputs[0]] for op in analysis.ops if op.type == "Conv2D")
    assert conv.bytes == 2 * 32 * 32 * 16 * 2  # fp16: two bytes per element
    trainable = sum(v.shape.num_elements() * 4 for v in model.trainable_variables)
    assert analysis.trainable_bytes == trainable
    for level, ops in enumerate(analysis.levels):  # every input comes from a lower level
        for op in ops:
            assert all(
                analysis.ops[analysis.tensors[t].producer].level < level
                for t in analysis.ops[op].inputs
            )
    assert analysis.unknown_size_tensors == 0


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"swapout_threshold": 0}, "swapout_threshold must be an integer >= 1 or -1"),
        ({"swapin_ahead": -2}, "swapin_ahead must be an integer >= 1"),
        ({"swapin_groupby": 1.5}, "swapin_groupby must be an integer >= 0"),
        ({"sync_mode": 4}, "sync_mode must be 0, 1, 2 or 3; received 4"),
        ({"serialization": ["x"]}, "serialization must be a list of levels"),
        ({"serialization": ["5:3"]}, "is empty"),
        ({"serialization_by_size": -1}, "serialization_by_size must be a number of GiB"),
        ({"mechanism": "teleport"}, "mechanism must be one of"),
        ({"safety_ratio": 0}, "safety_ratio must be in (0, 1]"),
        ({"device_memory": "lots"}, "device_memory must be a size like 16GiB"),
        ({"device_memory": "1GiB", "reserve": "2GiB"}, "leaves nothing"),
    ],
)
def test_bad_parameters_get_a_clear_error(kwargs, message):
    kwargs.setdefault("device_memory", "1GiB")
    with pytest.raises(lms.ParameterError) as raised:
        lms.LMS(**kwargs)
    assert message in str(raised.value)


def test_device_memory_is_required_on_the_emulated_device():
    with pytest.raises(lms.ParameterError, match="device_memory is required"):
        lms.LMS()


def test_a_graph_that_needs_no_lms_runs_unchanged(caplog):
    case = Case(*small_cnn(resolution=32))
    planner = lms.LMS(device_memory="64GiB")
    wrapped = planner.wrap(case.step)
    with caplog.at_level(logging.INFO, logger="lms"):
        assert_same_training(case, wrapped)
    assert planner.report["lms_needed"] is False and planner.report["swapped_bytes"] == 0
    assert "LMS is not necessary" in caplog.text


def test_a_budget_nothing_can_meet_is_a_clear_error():
    case = Case(*small_cnn())
    with pytest.raises(lms.NothingFitsError, match="no LMS parameters fit the budget .* largest"):
        lms.LMS(device_memory="4MiB").wrap(case.step)(case.images, case.labels)


def test_auto_tuned_plan_fits_the_budget_simulated_and_measured(tmp_path):
    """In a fresh process (tests/_lms_measure.py), so that the allocator's peak is this step's."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true"}
    completed = subprocess.run(
        [sys.executable, str(HERE / "_lms_measure.py"), str(tmp_path / "memory.png")],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    report, device_memory = result["report"], result["device_memory"]
    assert report["lms_needed"] and report["swapped_bytes"] > 0
    assert report["peak_bytes_with_lms"] <= result["budget"] < device_memory
    assert result["measured"] <= device_memory < result["plain"]
    assert "Found swapout_threshold=" in completed.stderr and "Added " in completed.stderr
    assert (tmp_path / "memory.png").read_bytes().startswith(b"\x89PNG")
    np.testing.assert_allclose(result["losses_lms"], result["losses_plain"], rtol=1e-4)


def test_keras_fit_with_the_lms_callback_matches_plain_fit():
    model, _, images, labels = small_cnn(resolution=128, batch=8, layers=5)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat(3)
    initial = [v.numpy() for v in model.variables]
    plain = model.fit(dataset, epochs=2, verbose=0).history["loss"]
    for variable, value in zip(model.variables, initial, strict=True):
        variable.assign(value)
    model.compile(
        optimizer=keras.optimizers.SGD(0.01),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    callback = lms.LMS(device_memory="1TiB", swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)
    with_lms = model.fit(dataset, epochs=2, verbose=0, callbacks=[callback]).history["loss"]
    np.testing.assert_allclose(with_lms, plain, rtol=1e-5)
    assert callback.report["swapped_tensors"] > 0


def test_simulated_peak_drops_with_more_swapping():
    case = Case(*small_cnn(resolution=64))
    analysis = lms.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    peaks = [
        lms.simulate(analysis, lms.plan(analysis, lms.Parameters(t, 1, 0))).peak_bytes
        for t in (1, 4, 16)
    ]
    assert peaks[0] <= peaks[1] <= peaks[2] <= lms.simulate(analysis).peak_bytes
    assert peaks[0] < lms.simulate(analysis).peak_bytes


@pytest.mark.compat
def test_report_timeline_is_pooled_and_keeps_the_peak():
    from lms.api import TIMELINE_POINTS, _pooled

    values = list(range(1000)) + [10**9] + list(range(1000))
    pooled = _pooled(values)
    assert len(pooled) <= TIMELINE_POINTS and max(pooled) == 10**9
    assert _pooled([1, 2, 3]) == [1, 2, 3]
