"""ResNet50 from keras.applications (weights=None), logits out, static batch."""

import keras

from suite.workloads.losses import classification as loss

__all__ = ["build", "loss"]


def build(resolution: int, batch: int, classes: int) -> keras.Model:
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch, name="images")
    return keras.applications.ResNet50(
        weights=None, input_tensor=inputs, classes=classes, classifier_activation=None
    )
