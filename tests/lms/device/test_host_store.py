"""The host store's arrays: swap-outs reuse the bytes of freed host arrays in the plan's arena,
never those of one TensorFlow still holds, and an arena a step outgrew is made for what the step
held (lms/device/host_store.py, host_arrays.py, host_arena.py)."""

import numpy as np
import tensorflow as tf
from process_maps import mapped

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


def _overwriter(store, results: dict):
    """A py_func that swaps out a 64 x 64 array of sevens while the step runs (into
    `results["other"]`): where the arena's bytes would go if it reused them too soon."""

    def overwrite(_):
        handle = store._put(np.full((64, 64), 7.0, np.float32), 1)
        results["other"] = store._get(handle)
        return np.float32(0)

    return overwrite


def test_an_array_a_tensor_still_wraps_is_not_reused():
    """A swap-in's array is wrapped by TensorFlow without a copy until its readers are done: a
    swap-out meanwhile gets a new array, and the tensor keeps its values."""
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)  # the overwrite finds the arena full: a new array
    kept = store._put(np.ones((64, 64), np.float32), 1)
    results = {}
    overwrite = _overwriter(store, results)

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


def test_an_arena_a_step_outgrew_is_made_anew_for_what_the_store_held():
    """A plan's arena holds one array; a step holds three at once (two cut afresh): after it,
    the arena is made for the three (and ARENA_SLACK more), and the next step cuts all three
    from it. A step that fits its arena leaves it as it is."""
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)

    def step() -> set:
        handles = [store._put(np.full((64, 64), k, np.float32), 1) for k in range(3)]
        arrays = [store._get(h) for h in handles]  # all three held at once before these reads
        for k, array in enumerate(arrays):
            np.testing.assert_array_equal(array, k)
        found = {store.arrays._arena.owns(array) for array in arrays}
        del arrays
        store.clear()
        return found

    assert step() == {True, False}
    assert store.arrays.arena_bytes == int(3 * 64 * 64 * 4 * 1.25)  # (a multiple of 64)
    assert step() == {True}
    grown = store.arrays.arena_bytes
    step()
    assert store.arrays.arena_bytes == grown


def test_a_slice_read_is_not_copied_and_keeps_its_bytes_while_tensorflow_wraps_it():
    """A piece's rows of a kept array are handed to TensorFlow without a copy when they are
    aligned and contiguous (a copy when not); the kept array's last read frees it in the store,
    and a swap-out meanwhile gets new bytes, not the slice's."""
    store = HostStore()
    store.arrays.allow(None, ONE_ARRAY)
    kept = store.put_whole(np.arange(64 * 64, dtype=np.float32).reshape(64, 64), 3)
    whole = store._arrays[int(kept[0])]
    assert np.shares_memory(store.get_slice(kept, 0, 16, 48), whole)
    assert not np.shares_memory(store.get_slice(kept, 1, 16, 48), whole)  # columns: strided
    results = {}
    overwrite = _overwriter(store, results)

    @tf.function
    def step():
        where = [tf.constant(kept), *(tf.constant(n, tf.int64) for n in (0, 16, 48))]
        rows = tf.numpy_function(store.get_slice, where, tf.float32)  # the last read
        rows.set_shape((32, 64))
        with tf.control_dependencies([rows]):
            done = tf.numpy_function(overwrite, [rows], tf.float32, stateful=True)
        with tf.control_dependencies([done]):
            return tf.reduce_sum(rows)

    want = float(np.arange(64 * 64, dtype=np.float32).reshape(64, 64)[16:48].sum())
    del whole
    assert float(step()) == want  # not 7 * 32 * 64: the arena left the wrapped rows alone
    np.testing.assert_array_equal(results["other"], 7.0)
    assert store.held_bytes == 0


def test_a_dropped_arena_is_freed_although_tensorflow_let_go_of_its_arrays_late():
    """TensorFlow drops a py_func's returned array from its own threads through a queue it
    empties when a py_func next runs: the store's `drop_arena` runs one, so the region goes
    back to the host before the closed loop's next plan is checked against what is free."""
    store = HostStore()
    store.arrays.allow(None, 64 * 2**20)
    kept = [store._put(np.ones((2**20,), np.float32), 1) for _ in range(16)]  # 64 MiB faulted

    @tf.function
    def step():  # parallel reads: TensorFlow's threads let go of their arrays
        backs = [tf.numpy_function(store._get, [tf.constant(k)], tf.float32) for k in kept]
        return tf.add_n([tf.reduce_sum(tf.raw_ops.DeepCopy(x=b)) for b in backs])

    result = step()  # (as the closed loop does: the new plan before the result is read)
    base = store.arrays._arena._base
    assert store.drop_arena() == 80 * 2**20
    assert not mapped(base)  # unmapped: its pages are the host's again
    assert float(result) == 16 * 2**20
