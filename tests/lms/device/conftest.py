"""Fixtures of the device tests."""

import pytest
import tensorflow as tf


def _conv_pool_chain(x, kernel):
    with tf.GradientTape() as tape:
        tape.watch([x, kernel])
        y = tf.nn.max_pool2d(tf.nn.conv2d(x, kernel, 1, "SAME"), 3, 2, "SAME")
        z = tf.nn.max_pool2d(y, 2, 2, "SAME")
        loss = tf.reduce_sum(z * z)
    return [z, *tape.gradient(loss, [x, kernel])]


@pytest.fixture
def conv_pool_chain():
    """A step of a convolution read only by a pool, read only by a pool, with the gradients of
    sum(z²) for x and the kernel: a chain of split ops when they are split."""
    return _conv_pool_chain
