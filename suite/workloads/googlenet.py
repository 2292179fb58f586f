"""Enlarged GoogLeNet: tf_cnn_benchmarks' Inception v1 layer list (no batch norm, no auxiliary
heads), ending in a global average pool instead of the 7x7 VALID pool so any resolution works."""

import keras

from suite.workloads.losses import classification as loss

__all__ = ["build", "loss"]

# (name, 1x1, 3x3 reduce, 3x3, 5x5 reduce, 5x5, pool projection), "pool" = 3x3/2 max pool
_LAYERS = (
    ("3a", 64, 96, 128, 16, 32, 32),
    ("3b", 128, 128, 192, 32, 96, 64),
    "pool",
    ("4a", 192, 96, 208, 16, 48, 64),
    ("4b", 160, 112, 224, 24, 64, 64),
    ("4c", 128, 128, 256, 24, 64, 64),
    ("4d", 112, 144, 288, 32, 64, 64),
    ("4e", 256, 160, 320, 32, 128, 128),
    "pool",
    ("5a", 256, 160, 320, 32, 128, 128),
    ("5b", 384, 192, 384, 48, 128, 128),
)


def _conv(x, filters, size, name, strides=1):
    return keras.layers.Conv2D(
        filters, size, strides, padding="same", activation="relu", name=name
    )(x)


def _inception(x, name, k, l3r, l3, n5r, n5, q):
    branches = [
        _conv(x, k, 1, f"inception_{name}_1x1"),
        _conv(_conv(x, l3r, 1, f"inception_{name}_3x3_reduce"), l3, 3, f"inception_{name}_3x3"),
        _conv(_conv(x, n5r, 1, f"inception_{name}_5x5_reduce"), n5, 5, f"inception_{name}_5x5"),
        _conv(
            keras.layers.MaxPooling2D(3, 1, "same", name=f"inception_{name}_pool")(x),
            q,
            1,
            f"inception_{name}_pool_proj",
        ),
    ]
    return keras.layers.Concatenate(name=f"inception_{name}_concat")(branches)


def build(resolution: int, batch: int, classes: int) -> keras.Model:
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch, name="images")
    x = _conv(inputs, 64, 7, "conv1", strides=2)
    x = keras.layers.MaxPooling2D(3, 2, "same", name="pool1")(x)
    x = _conv(x, 64, 1, "conv2")
    x = _conv(x, 192, 3, "conv3")
    x = keras.layers.MaxPooling2D(3, 2, "same", name="pool2")(x)
    pools = 2
    for layer in _LAYERS:
        if layer == "pool":
            pools += 1
            x = keras.layers.MaxPooling2D(3, 2, "same", name=f"pool{pools}")(x)
        else:
            x = _inception(x, *layer)
    x = keras.layers.GlobalAveragePooling2D(name="global_pool")(x)
    logits = keras.layers.Dense(classes, name="logits")(x)
    return keras.Model(inputs, logits, name="googlenet")
