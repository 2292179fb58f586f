"""Workload builders on real TensorFlow: shapes, parameter counts, one real training step.

Marked `compat`: `inv test` runs these on the newest TensorFlow (Keras 3) and on 2.14.1 (Keras 2).
"""

import math

import numpy as np
import pytest
import tensorflow as tf

from suite.errors import SuiteError
from suite.workloads import WORKLOADS, build_workload, data, training
from suite.workloads.summary import model_summary

pytestmark = pytest.mark.compat

# Parameter counts do not depend on resolution (global pooling, fully convolutional nets).
# ResNet50's is keras.applications' documented 25,636,712 (1000 classes).
EXPECTED = {
    "googlenet": (6_999_577, 64, (2, 1001)),
    "deeplabv3plus": (41_258_213, 64, (2, 64, 64, 21)),
    "resnet50": (25_636_712, 64, (2, 1000)),
    "unet3d": (16_318_307, 16, (2, 16, 16, 16, 3)),
}


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_parameter_count_and_output_shape(name):
    parameters, resolution, shape = EXPECTED[name]
    model, _ = build_workload(name, resolution, batch=2)
    assert model.count_params() == parameters
    assert tuple(model.output.shape) == shape


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_one_training_step_changes_weights_and_gives_finite_loss(name):
    info = WORKLOADS[name]
    resolution = EXPECTED[name][1]
    model, loss_fn = build_workload(name, resolution, batch=2)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    images, labels = data.synthetic_batch(info, resolution, 2, info.default_classes)
    before = [v.numpy().copy() for v in model.trainable_variables]
    loss = float(step(images, labels))
    assert math.isfinite(loss) and loss > 0
    changed = [
        not np.array_equal(b, v.numpy())
        for b, v in zip(before, model.trainable_variables, strict=True)
    ]
    assert sum(changed) > len(changed) // 2


def test_fp16_builds_half_precision_layers_and_trains():
    model, loss_fn = build_workload("googlenet", 64, 2, precision="fp16")
    assert model.get_layer("conv1").compute_dtype == "float16"
    assert model.get_layer("conv1").variable_dtype == "float32"
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp16")
    images, labels = data.synthetic_batch(WORKLOADS["googlenet"], 64, 2, 1001)
    assert math.isfinite(float(step(images, labels)))
    # the global policy is restored after building
    import keras

    assert keras.mixed_precision.global_policy().name == "float32"


def test_unet_resolution_must_be_multiple_of_eight():
    with pytest.raises(SuiteError, match="multiple of 8"):
        build_workload("unet3d", 36, 1)


def test_googlenet_builds_at_the_enlarged_seed_size():
    summary = model_summary("googlenet", 2240, 15, "fp16")
    assert summary["largest_activation"]["layer"] == "conv1"
    assert summary["largest_activation"]["shape"] == [15, 1120, 1120, 64]
    assert summary["largest_activation"]["bytes"] == 15 * 1120 * 1120 * 64 * 2


def test_segmentation_loss_ignores_label_255():
    from suite.workloads.losses import segmentation

    logits = tf.random.normal((1, 4, 4, 3))
    labels = tf.constant(np.full((1, 4, 4), 255))
    assert float(segmentation(labels, logits)) == 0.0
    labels = tf.zeros((1, 4, 4), tf.int32)
    assert float(segmentation(labels, logits)) > 0.0
