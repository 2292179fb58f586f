"""The update check the lms tests (and benchmarks/lms_equivalence.py) run a rewritten step
through: one step's updates against plain training's, within a tolerance per precision, and the
models it runs on."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf
from gpu_path_cases import recurrent_case
from lms_cases import Case, applications_case, small_cnn, step_update, workload_case

import lms
from suite.workloads import WORKLOADS, build_workload, data

EXACT_ARITHMETIC = {"arithmetic_optimization": False, "remapping": False}


def update_mismatches(got, want, rtol, floor):
    """Indices of the variables whose update differs by more than `rtol` of its own size.

    `floor` (a fraction of the whole step's update) absorbs the rounding noise of updates that are
    zero in exact arithmetic, e.g. the bias of a convolution that batch norm follows: its gradient
    is ~1e-8 of the step's and is pure rounding, so relative to itself it differs by ~100 %."""
    total = math.sqrt(sum(float(np.sum(w * w)) for w in want))
    return [
        index
        for index, (g, w) in enumerate(zip(got, want, strict=True))
        if np.linalg.norm(g - w) > rtol * np.linalg.norm(w) + floor * total
    ]


# (rtol, floor) of the update check. Measured with every swappable tensor swapped, exact
# arithmetic, three processes per model: the largest difference used 25 % of its tolerance (3D
# U-Net, below), 22 % (ResNet50: noise-only updates differ by 2.2e-7 of the step's) and 21 %
# (GoogLeNet fp16: 7.8e-3 of its own size; fp16 kernels without oneDNN's path), the rest < 7 %.
FP32_TOLERANCE, FP16_TOLERANCE = (1e-4, 1e-6), (2e-2, 1e-4)
# oneDNN pairs a max pool's forward and gradient ops through a workspace of argmax indices; once
# the pool's output reaches the gradient through a swap-in, the pair is broken and the gradient
# op breaks ties between equal values (ReLU's zeros) its own way. Both are valid gradients; they
# differ by up to 1.5e-2 of the deeper 3D convolutions' updates (none with TF_ENABLE_ONEDNN_OPTS=0).
MAX_POOL_TIES_TOLERANCE = (3e-2, 1e-6)


def assert_close_gradients(got, want):
    """Each tensor of `got` to 1e-5 of `want`'s, or to 1e-6 of the largest value of them all:
    a gradient that is ~0 in exact arithmetic (a convolution's bias that batch norm follows) is
    rounding, ordered otherwise when its op is split."""
    scale = max(np.abs(w).max() for w in want)
    for g, w in zip(got, want, strict=True):
        atol = max(1e-5 * np.abs(w).max(), 1e-6 * scale)
        np.testing.assert_allclose(np.asarray(g), w, rtol=1e-5, atol=atol)


def update_tolerance(case, tolerance=None):
    """(rtol, floor): the given one, else the one of the case's precision."""
    return tolerance or (FP16_TOLERANCE if case.precision == "fp16" else FP32_TOLERANCE)


def assert_same_updates(case, function, tolerance=None):
    rtol, floor = update_tolerance(case, tolerance)
    loss, momentums, moved = step_update(case, function)
    want_loss, want_momentums, want_moved = step_update(case, case.step)
    assert loss == pytest.approx(want_loss, rel=rtol), "loss"
    names = [v.name for v in case.model.trainable_variables]
    bad = update_mismatches(momentums, want_momentums, rtol, floor)
    assert not bad, f"updates of {len(bad)} variables differ, e.g. {[names[i] for i in bad][:3]}"
    names = [v.name for v in case.model.non_trainable_variables]
    bad = update_mismatches(moved, want_moved, rtol, floor)
    assert not bad, f"non-trainable {[names[i] for i in bad][:3]} moved differently"


def aggressive():
    """Swap everything that can be swapped: the strongest test of the rewrite."""
    return lms.LMS(device_memory="1TiB", swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)


def force_plan(planner, case, mutate=None):
    """Rewrite with fixed parameters even though the budget would not need LMS."""
    concrete = case.step.get_concrete_function(case.images, case.labels)
    analysis = lms.internal.analyze(concrete.graph)
    plan = lms.internal.plan(analysis, planner.parameters)
    if mutate:
        plan = mutate(analysis, plan, concrete.graph)
    from lms.device.rewriter import rewrite

    store = lms.internal.HostStore()
    rewritten = rewrite(concrete, analysis, plan, store)
    rewritten.lms_store = store
    return rewritten, analysis, plan, concrete


# id -> (case, tolerance or None for the precision's): the models the update check runs on
# (also benchmarks/lms_equivalence.py)
EQUIVALENCE_CASES = {
    "cnn-fp32": (lambda: Case(*small_cnn()), None),
    "cnn-fp16": (lambda: Case(*small_cnn(precision="fp16"), precision="fp16"), None),
    "googlenet": (lambda: workload_case("googlenet", 64, 2), None),
    "googlenet-fp16": (lambda: workload_case("googlenet", 64, 2, "fp16"), None),
    "unet3d": (lambda: workload_case("unet3d", 16), MAX_POOL_TIES_TOLERANCE),
    "vgg16": (lambda: applications_case("VGG16", 64), None),
    "deeplabv3plus": (lambda: workload_case("deeplabv3plus", 96, 2), None),
    "resnet50": (lambda: workload_case("resnet50", 96, 4), None),
    "mobilenetv2": (lambda: applications_case("MobileNetV2", 96, 4), None),
    "densenet121": (lambda: applications_case("DenseNet121", 64), None),
    # a GRU and an LSTM: While loops, whose accumulated lists swap stacked (lms/device/lists.py)
    "recurrent": (recurrent_case, None),
}
# the tests' cases: the same, but DeepLabV3+ with 2 of Xception-65's 16 identical middle-flow
# blocks (every layer kind and size, a third of the ops: 4,700 made its checks CI's longest);
# benchmarks/lms_equivalence.py measures the tolerances' margins on the whole model
TEST_CASES = EQUIVALENCE_CASES | {
    "deeplabv3plus": (lambda: workload_case("deeplabv3plus", 96, 2, middle_blocks=2), None),
    # CPU's half-precision convolutions are slow (25-37 s a check at 96² and 64²): the same
    # layers at a quarter of the pixels
    "cnn-fp16": (lambda: Case(*small_cnn(48, precision="fp16"), precision="fp16"), None),
    "googlenet-fp16": (lambda: workload_case("googlenet", 32, 2, "fp16"), None),
}


@tf.custom_gradient
def _swish(x):
    y = x * tf.sigmoid(x)

    def gradient(upstream):
        s = tf.sigmoid(x)
        return upstream * (s + x * s * (1 - s))

    return y, gradient


class Swish(keras.layers.Layer):
    """A layer with a custom gradient: its forward op is IdentityN(y, x) of which only y is read."""

    def call(self, x):
        return _swish(x)


def mixed_block_case(resolution=32, batch=2):
    """Depthwise convolution, a custom gradient, layer norm and self-attention in one model: the
    kinds of ops the suite's workloads do not have."""
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
    x = keras.layers.Conv2D(16, 3, strides=2, padding="same")(inputs)
    x = Swish()(keras.layers.DepthwiseConv2D(3, padding="same")(x))
    x = keras.layers.LayerNormalization()(x)
    tokens = keras.layers.Reshape(((resolution // 2) ** 2, 16))(x)
    attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)(tokens, tokens)
    x = keras.layers.LayerNormalization()(tokens + attended)
    x = Swish()(keras.layers.Dense(32)(x))
    model = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(x)))
    images = tf.random.stateless_uniform((batch, resolution, resolution, 3), seed=(9, 10))
    labels = tf.random.stateless_uniform((batch,), (11, 12), maxval=10, dtype=tf.int32)
    from suite.workloads.losses import classification

    return Case(model, classification, images, labels)


def unet_case(resolution=24):
    model, loss_fn = build_workload("unet3d", resolution, 1)
    info = WORKLOADS["unet3d"]
    images, labels = data.synthetic_batch(info, resolution, 1, info.default_classes)
    return Case(model, loss_fn, images, labels)
