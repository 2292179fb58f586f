"""The models and plans of tests/lms/observe/test_placement.py: each step built as a GPU user's is
(its variables on the compute device, here the two-device mode's /CPU:1), with the plans LMS makes
for it, checked in a child process (_two_device_case.py) from what TensorFlow ran.

Two plan kinds per model:

- "swap": every tensor that can be swapped is (TFLMSv2's parameters all given: threshold 1,
  ahead 1, no grouping), splitting off, for a device of 1 MiB: the most swaps a step can have;
- "split": the same swaps, and every op of one type the model has split into two pieces
  (`SPLIT_OPS`), so that DevicePieces' keeps, reads, stores and concats are there too.
"""

import keras
import tensorflow as tf
from lms_cases import Case, applications_case, run_child, workload_case

from suite.workloads.losses import classification

COMPUTE_DEVICE = "/CPU:1"  # the two-device mode's compute device (lms/device/target.py)
DEVICE_MEMORY = "1MiB"  # below every step's resident bytes: the given parameters apply as given
SWAPS = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}


def _classifier(model_of, shape, batch: int, seed: int) -> Case:
    """A Keras model of `model_of(inputs)` on a random batch of `shape`, ten classes."""
    inputs = keras.Input(shape, batch_size=batch)
    model = keras.Model(inputs, keras.layers.Dense(10)(model_of(inputs)))
    images = tf.random.stateless_uniform((batch, *shape), seed=(seed, 1))
    labels = tf.random.stateless_uniform((batch,), (seed, 2), maxval=10, dtype=tf.int32)
    return Case(model, classification, images, labels)


def dilated_audio_case(length: int = 512, batch: int = 2) -> Case:
    """A WaveNet-like stack: causal Conv1D with dilations 1..16 and residual sums (a dilated
    convolution is SpaceToBatchND, Conv2D, BatchToSpaceND in TensorFlow)."""

    def body(x):
        x = keras.layers.Conv1D(16, 1)(x)
        for rate in (1, 2, 4, 8, 16):
            y = keras.layers.Conv1D(16, 2, dilation_rate=rate, padding="causal", activation="relu")(
                x
            )
            x = keras.layers.Add()([x, y])
        return keras.layers.GlobalAveragePooling1D()(x)

    return _classifier(body, (length, 4), batch, 21)


def recurrent_case(length: int = 16, batch: int = 2) -> Case:
    """A dense projection, a GRU and an LSTM over a sequence (While loops on the CPU)."""

    def body(x):
        x = keras.layers.Dense(32, activation="relu")(x)
        x = keras.layers.GRU(32, return_sequences=True)(x)
        return keras.layers.LSTM(32)(x)

    return _classifier(body, (length, 8), batch, 22)


def transformer_case(length: int = 32, batch: int = 2) -> Case:
    """One Transformer encoder block: self-attention and an MLP, residuals, layer norms."""

    def body(x):
        x = keras.layers.Dense(32)(x)
        attended = keras.layers.MultiHeadAttention(num_heads=2, key_dim=16)(x, x)
        x = keras.layers.LayerNormalization()(x + attended)
        hidden = keras.layers.Dense(64, activation="relu")(x)
        x = keras.layers.LayerNormalization()(x + keras.layers.Dense(32)(hidden))
        return keras.layers.GlobalAveragePooling1D()(x)

    return _classifier(body, (length, 16), batch, 23)


def conv3d_case(side: int = 16, batch: int = 2) -> Case:
    """A small 3D convolutional classifier: Conv3D, MaxPool3D, global pooling."""

    def body(x):
        for filters in (8, 8):
            x = keras.layers.Conv3D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling3D(2)(x)
        x = keras.layers.Conv3D(16, 3, padding="same", activation="relu")(x)
        return keras.layers.GlobalAveragePooling3D()(x)

    return _classifier(body, (side, side, side, 2), batch, 24)


# name -> a Case (the suite's four workloads and models the suite does not use), small sizes
MODELS = {
    "googlenet": lambda: workload_case("googlenet", 64, 2),
    # two of Xception-65's 16 identical middle-flow blocks: every layer kind and size, a third of
    # the ops (the 4,700-op step took 8-16 s to trace and 10-15 s per Grappler pass)
    "deeplabv3plus": lambda: workload_case("deeplabv3plus", 64, 2, middle_blocks=2),
    "resnet50": lambda: workload_case("resnet50", 64, 2),
    "unet3d": lambda: workload_case("unet3d", 16, 1),
    "mobilenetv2": lambda: applications_case("MobileNetV2", 32, 2),
    "densenet121": lambda: applications_case("DenseNet121", 32, 2),
    "dilated-audio": dilated_audio_case,
    "recurrent": recurrent_case,
    "transformer": transformer_case,
    "conv3d": conv3d_case,
}
SUITE_WORKLOADS = ("googlenet", "deeplabv3plus", "resnet50", "unet3d")

# the op types each model's split plan splits (one the model has, in two pieces; the conv3d
# model's convolutions with their bias and ReLU, which chain: lms/split/chain.py on the GPU path)
SPLIT_OPS = {
    "googlenet": "MaxPool",
    "deeplabv3plus": "DepthwiseConv2dNative",
    "resnet50": "MaxPool",
    "unet3d": "Conv3D",
    "mobilenetv2": "DepthwiseConv2dNative",
    "densenet121": "AvgPool",
    "dilated-audio": "Conv2D",
    "recurrent": "Relu",
    "transformer": "Relu",
    "conv3d": ("Conv3D", "BiasAdd", "Relu"),
}


def build(name: str) -> Case:
    """The model `name` with its variables (and its optimizer's) on the compute device."""
    with tf.device(COMPUTE_DEVICE):
        return MODELS[name]()


def lms_options(kind: str, model: str) -> dict:
    """The LMS options of a plan kind ("swap" or "split") for `model`."""
    types = SPLIT_OPS[model]
    types = (types,) if isinstance(types, str) else types
    split = dict.fromkeys(types, 2) if kind == "split" else "off"
    return dict(
        device_memory=DEVICE_MEMORY,
        mechanism="two-device",
        split=split,
        host_memory=None,
        **SWAPS,
    )


# Models and plans grouped into child processes (each pays TensorFlow's start, and a model its
# build and its plain step, once), run two at a time (tests/lms/observe/test_placement.py), the
# longest first. The three largest steps run their split plan only, which swaps as their swap plan
# does (the same parameters) beside the ops it splits: DeepLabV3+'s step traces in 8-16 s, and
# Grappler takes 10-15 s over each of its 4,700-op rewrites, as long in the replay and again for
# the update check's instantiations; a swap plan each would add 75-100 s (DeepLabV3+), 25 s
# (ResNet50) and 15 s (MobileNetV2) of CPU to a file CI runs twice (oneDNN's and Eigen's
# kernels) on two cores.
GROUPS = {
    "deeplabv3plus": [("deeplabv3plus", "split")],
    # the other heavy models, in a group of their own: test_placement runs them on one kernel set
    "heavy": [("resnet50", "split"), ("mobilenetv2", "split")],
    "workloads": [(m, k) for m in ("googlenet", "unet3d") for k in ("swap", "split")],
    "models": [
        (m, k) for m in ("dilated-audio", "recurrent", "transformer") for k in ("swap", "split")
    ],
    "small": [("conv3d", "swap"), ("conv3d", "split")],
}
# the negative controls, in the small group: (model, plan, control)
CONTROLS = [("conv3d", "swap", "device-swapin"), ("conv3d", "swap", "unkept")]
CONTROLS += [("conv3d", "split", "unkept")]
GROUP_OF = {(m, k, None): g for g, pairs in GROUPS.items() for m, k in pairs}
GROUP_OF.update({control: "small" for control in CONTROLS})


def group_items(group: str) -> list:
    """The child's items of `group`: every check for the plans, placement only for controls."""
    items = [{"model": m, "plan": k} for m, k in GROUPS[group]]
    items += [
        {"model": m, "plan": k, "control": c, "checks": ["copies"] if c == "device-swapin" else []}
        for (m, k, c), g in GROUP_OF.items()
        if g == group and c is not None
    ]
    return items


def run_group(group: str) -> dict:
    """_two_device_case.py on `group`'s items in a fresh process: {(model, plan, control): the
    child's result}, and under "child" what the child said of itself."""
    import json

    child = run_child("_two_device_case.py", json.dumps(group_items(group)))[1]
    found = {(r["model"], r["plan"], r["control"]): r for r in child["results"]}
    found["child"] = {k: v for k, v in child.items() if k != "results"}
    return found
