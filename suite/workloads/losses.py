"""Losses of the workloads, computed in float32 whatever the model's compute dtype."""

import tensorflow as tf

IGNORE_LABEL = 255  # DeepLab's VOC records mark object borders with 255: no loss there


def classification(labels, logits):
    """Mean softmax cross-entropy, one class id per sample."""
    per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32)
    )
    return tf.reduce_mean(per_sample)


def segmentation(labels, logits):
    """Per-pixel softmax cross-entropy averaged over pixels whose label is not IGNORE_LABEL."""
    labels = tf.cast(labels, tf.int32)
    valid = tf.not_equal(labels, IGNORE_LABEL)
    per_pixel = tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.where(valid, labels, tf.zeros_like(labels)), logits=tf.cast(logits, tf.float32)
    )
    weights = tf.cast(valid, tf.float32)
    return tf.reduce_sum(per_pixel * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def dice(labels, logits, smooth=1.0):
    """Soft Dice loss (1 - Dice coefficient) over all voxels and labels, on sigmoid outputs."""
    probabilities = tf.sigmoid(tf.cast(logits, tf.float32))
    labels = tf.cast(labels, tf.float32)
    intersection = tf.reduce_sum(labels * probabilities)
    total = tf.reduce_sum(labels) + tf.reduce_sum(probabilities)
    return 1.0 - (2.0 * intersection + smooth) / (total + smooth)
