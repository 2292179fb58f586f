"""The host store's array pool: swap-outs reuse freed host arrays, never one TensorFlow still
holds (lms/device/host_store.py)."""

import numpy as np
import tensorflow as tf

from lms.device.host_store import HostStore


def test_a_swap_out_reuses_the_array_its_shape_freed():
    store = HostStore()
    first = store._put(np.ones((64, 64), np.float32), 1)
    held = store._get(first)
    address = held.ctypes.data
    del held  # nothing but the pool refers to it now
    second = store._put(np.full((64, 64), 2.0, np.float32), 1)
    again = store._get(second)
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, 2.0)


def test_an_array_a_tensor_still_wraps_is_not_reused():
    """A swap-in's array is wrapped by TensorFlow without a copy until its readers are done: a
    swap-out meanwhile gets a new array, and the tensor keeps its values."""
    store = HostStore()
    kept = store._put(np.ones((64, 64), np.float32), 1)
    results = {}

    def overwrite(_):
        handle = store._put(np.full((64, 64), 7.0, np.float32), 1)
        results["other"] = store._get(handle)
        return np.float32(0)

    @tf.function
    def step():
        back = tf.numpy_function(store._get, [tf.constant([int(kept[0])], tf.int64)], tf.float32)
        back.set_shape((64, 64))
        with tf.control_dependencies([back]):
            done = tf.numpy_function(overwrite, [back], tf.float32, stateful=True)
        with tf.control_dependencies([done]):
            return tf.reduce_sum(back)

    assert float(step()) == 64 * 64  # not 7 * 64 * 64: the pool left the wrapped array alone
    np.testing.assert_array_equal(results["other"], 7.0)


def test_the_pool_holds_no_more_than_the_store_held_at_once():
    store = HostStore()
    handles = [store._put(np.ones((32, 32), np.float32), 1) for _ in range(3)]
    for handle in handles:
        store._get(handle)
    assert store.arrays.pooled_bytes <= 3 * 32 * 32 * 4
    assert store.held_bytes == 0
