"""The host store's arrays: swap-outs reuse the bytes of freed host arrays in the plan's arena,
never those of one TensorFlow still holds (lms/device/host_store.py, host_arena.py)."""

import numpy as np
import tensorflow as tf

from lms.device.host_store import HostStore

ONE_ARRAY = int(64 * 64 * 4 / 1.25)  # a host peak whose arena holds one 64 x 64 array


def test_a_swap_out_reuses_the_bytes_an_array_freed():
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)
    first = store._put(np.ones((64, 64), np.float32), 1)
    held = store._get(first)
    address = held.ctypes.data
    del held  # nothing but the arena refers to it now
    second = store._put(np.full((64, 64), 2.0, np.float32), 1)
    again = store._get(second)
    assert again.ctypes.data == address
    np.testing.assert_array_equal(again, 2.0)


def test_an_array_a_tensor_still_wraps_is_not_reused():
    """A swap-in's array is wrapped by TensorFlow without a copy until its readers are done: a
    swap-out meanwhile gets a new array, and the tensor keeps its values."""
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)  # the overwrite finds the arena full: a new array
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

    assert float(step()) == 64 * 64  # not 7 * 64 * 64: the arena left the wrapped array alone
    np.testing.assert_array_equal(results["other"], 7.0)


def test_the_arena_stays_the_size_the_plan_made_it():
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)
    addresses = set()
    for _ in range(3):
        handle = store._put(np.ones((64, 64), np.float32), 1)
        addresses.add(store._get(handle).ctypes.data)
    assert len(addresses) == 1 and store.arrays.arena_bytes == 64 * 64 * 4
    assert store.held_bytes == 0
