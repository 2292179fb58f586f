"""Fixtures of the lms tests."""

import pytest
import tensorflow as tf
from lms_equivalence import EXACT_ARITHMETIC


@pytest.fixture
def exact_arithmetic():
    """Grappler's arithmetic optimizer and remapper off for the test (restored after).

    Both rewrite by who reads a tensor: a swap-out is one more reader, which stops e.g. the fusion
    of a convolution with its bias and ReLU into one oneDNN kernel, and fused and unfused kernels
    round differently (batch norm over a test-sized batch then amplifies the last bits). With both
    off in the plain and the LMS run alike, the remaining differences are rounding noise."""
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(EXACT_ARITHMETIC)
    yield
    tf.config.optimizer.set_experimental_options({k: saved.get(k, True) for k in EXACT_ARITHMETIC})
