"""Models, steps and child processes the lms tests share (and the child scripts beside this file
import): a small CNN, the suite's workloads and Keras applications as `Case`s, one step's update,
and a script of tests/support run in a fresh process on the emulated device."""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from suite.workloads import WORKLOADS, build_workload, data, training

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
        self.initial_statistics = [v.numpy() for v in model.non_trainable_variables]

    def _state(self):
        return list(self.model.variables) + list(self.optimizer.variables)

    def reset(self):
        for variable, value in zip(self._state(), self.initial, strict=True):
            variable.assign(value)


def workload_case(name, resolution, batch=1, precision="fp32", middle_blocks=None):
    """`middle_blocks`: DeepLabV3+ with only the first that many of its 16 identical middle-flow
    blocks (suite/workloads/deeplab.py), for checks whose cost grows with the op count."""
    if middle_blocks is None:
        model, loss_fn = build_workload(name, resolution, batch, precision)
    else:
        from suite.workloads import deeplab, precision_policy

        with precision_policy(precision):
            model = deeplab.build(resolution, batch, WORKLOADS[name].default_classes, middle_blocks)
        loss_fn = deeplab.loss
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


def _sequence_loss(y, p):
    return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(y, p, from_logits=True))


def wavenet_case(samples=8192, batch=2, channels=32, layers=8):
    """A small WaveNet-style model (issue 43): dilated causal Conv1Ds (Keras runs each as
    ExpandDims + Conv2D: the gradient reads the view), gated tanh x sigmoid units, residual
    additions and a sum of skip connections."""
    audio = keras.Input((samples, 1), batch_size=batch)
    x = keras.layers.Conv1D(channels, 2, padding="causal")(audio)
    skips = []
    for layer in range(layers):
        h = keras.layers.Conv1D(2 * channels, 2, dilation_rate=2**layer, padding="causal")(x)
        gate = keras.layers.Activation("tanh")(h[..., :channels]) * keras.layers.Activation(
            "sigmoid"
        )(h[..., channels:])
        x = x + keras.layers.Conv1D(channels, 1)(gate)
        skips.append(keras.layers.Conv1D(channels, 1)(gate))
    y = keras.layers.Conv1D(10, 1)(keras.layers.Activation("relu")(keras.layers.Add()(skips)))
    model = keras.Model(audio, keras.layers.GlobalAveragePooling1D()(y))
    sound = tf.random.stateless_uniform((batch, samples, 1), seed=(9, 10))
    labels = tf.random.stateless_uniform((batch,), (11, 12), maxval=10, dtype=tf.int32)
    return Case(model, _sequence_loss, sound, labels)


def sequence_mlp_case(length=256, batch=4, width=32, blocks=4):
    """Residual GELU MLP blocks over a sequence (a Transformer's or a Mixer's feed-forward
    layers): Keras runs each Dense as Reshape + MatMul, and the gradient reads the views."""
    tokens = keras.Input((length, width), batch_size=batch)
    x = tokens
    for _ in range(blocks):
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.Dense(4 * width, activation="gelu")(y)
        x = x + keras.layers.Dense(width)(y)
    model = keras.Model(tokens, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling1D()(x)))
    inputs = tf.random.stateless_uniform((batch, length, width), seed=(13, 14))
    labels = tf.random.stateless_uniform((batch,), (15, 16), maxval=10, dtype=tf.int32)
    return Case(model, _sequence_loss, inputs, labels)


def named_case(name, resolution, batch=1):
    """A suite workload by its name, else a Keras application (MobileNetV2, DenseNet121, ...):
    what the benchmarks take on their command line."""
    if name in WORKLOADS:
        return workload_case(name, resolution, batch)
    return applications_case(name, resolution, batch)


def step_update(case, function):
    """The loss and every variable's update of one training step from the initial state, on the
    function's second call (so that state a first call leaves behind, e.g. in the host store,
    would show).

    A trainable variable's update is the optimizer's momentum after one step: -learning_rate x the
    gradient the optimizer applied, in full float precision (the weights themselves move by 1e-8
    of their size, far below any useful tolerance). A non-trainable variable's (batch-norm
    statistics) is what the step moved it by. This is what LMS must preserve, including gradients
    that reach the optimizer through a swap-in. Only one step: a second step's gradients depend on
    the first step's rounding, which batch norm over a test-sized batch amplifies to ~1 %."""
    case.reset()
    function(case.images, case.labels)
    case.reset()
    loss = float(function(case.images, case.labels))
    momentums = [m.numpy().astype(np.float64) for m in case.optimizer.momentums]
    moved = [
        v.numpy().astype(np.float64) - start.astype(np.float64)
        for v, start in zip(
            case.model.non_trainable_variables, case.initial_statistics, strict=True
        )
    ]
    return loss, momentums, moved


def run_child(script: str, *args, extra_env=None):
    """tests/`script` in a fresh process on the emulated device (so that the allocator's peak is
    its own), with `extra_env`: the completed process and the JSON of its last line."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", **(extra_env or {})}
    completed = subprocess.run(
        [sys.executable, str(HERE / script), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed, json.loads(completed.stdout.strip().splitlines()[-1])
