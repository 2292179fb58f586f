"""3D U-Net as in the ellisdg/3DUnetCNN model that IBM's LMS examples trained: depth 4 (three
2x2x2 poolings), 32 base filters doubling per level, two 3x3x3 convolutions per level (the second
with twice the filters on the way down), upsampling + concatenation on the way up, one sigmoid map
per label, Dice loss. Channels-last (CPU kernels need it); the seed ran channels-first on GPUs."""

import keras

from suite.workloads.losses import dice as loss

__all__ = ["build", "loss"]

DEPTH = 4
BASE_FILTERS = 32
CHANNELS = 4  # BraTS-style input: four MR modalities


def _conv(x, filters, name):
    return keras.layers.Conv3D(filters, 3, padding="same", activation="relu", name=name)(x)


def build(resolution: int, batch: int, classes: int) -> keras.Model:
    inputs = keras.Input((resolution,) * 3 + (CHANNELS,), batch_size=batch, name="volumes")
    x, skips = inputs, []
    for level in range(DEPTH):
        filters = BASE_FILTERS * 2**level
        x = _conv(x, filters, f"down{level}_conv1")
        x = _conv(x, filters * 2, f"down{level}_conv2")
        if level < DEPTH - 1:
            skips.append(x)
            x = keras.layers.MaxPooling3D(2, name=f"down{level}_pool")(x)
    for level in range(DEPTH - 2, -1, -1):
        x = keras.layers.UpSampling3D(2, name=f"up{level}_upsample")(x)
        x = keras.layers.Concatenate(name=f"up{level}_concat")([x, skips[level]])
        filters = skips[level].shape[-1]
        x = _conv(x, filters, f"up{level}_conv1")
        x = _conv(x, filters, f"up{level}_conv2")
    logits = keras.layers.Conv3D(classes, 1, name="logits")(x)
    return keras.Model(inputs, logits, name="unet3d")
