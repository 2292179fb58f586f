"""lms/device/host_arena.py: arrays cut from one region are aligned and disjoint; an array still
referenced (as TensorFlow refers to an array a py_func returned) is never cut again; once nothing
else refers to it its bytes are, merged with free neighbours; a region full of arrays in use
says None. Marked compat: also run on TensorFlow 2.14.1."""

import numpy as np
import pytest

from lms.device.host_arena import ALIGNMENT, HostArena

pytestmark = pytest.mark.compat
KIB = 1024


def _address(array) -> int:
    return array.ctypes.data


def test_arrays_are_aligned_and_disjoint_and_a_full_region_says_none():
    arena = HostArena(64 * KIB)
    arrays = [arena.take((1000,), np.float32) for _ in range(16)]  # 4,000 B: 4,032 cut
    assert all(a is not None and _address(a) % ALIGNMENT == 0 for a in arrays)
    for k, a in enumerate(arrays):
        a[:] = k
    assert [float(a[0]) for a in arrays] == list(range(16))  # no two share bytes
    assert arena.take((1000,), np.float32) is None  # 16 x 4,032 = 64,512: 1,024 B left
    assert arena.take((10,), np.float64).shape == (10,)  # what is left still serves
    assert arena.lent_bytes == 16 * 4032 + 128


def test_an_array_still_referenced_is_not_cut_again():
    arena = HostArena(8 * KIB)
    held = arena.take((1024,), np.float32)  # 4 KiB
    other = arena.take((1024,), np.float32)
    address = _address(other)
    del other  # nothing else refers to it: its bytes come back when the region is full
    again = arena.take((1024,), np.float32)
    assert again is not None and _address(again) == address
    assert arena.take((16,), np.uint8) is None  # `held` and `again` are referenced
    del held
    assert arena.take((16,), np.uint8) is not None


def test_freed_neighbours_merge_into_one_block():
    arena = HostArena(12 * KIB)
    first, second, third = (arena.take((4 * KIB,), np.uint8) for _ in range(3))
    start = _address(first)
    del first, second  # adjacent: 8 KiB free in one block once taken back
    both = arena.take((8 * KIB,), np.uint8)
    assert both is not None and _address(both) == start
    del third
    assert arena.take((4 * KIB,), np.uint8) is not None


def test_shapes_and_types_reuse_any_freed_bytes():
    arena = HostArena(16 * KIB)
    block = arena.take((4, 1024), np.float32)  # 16 KiB: the whole region
    start = _address(block)
    del block
    pieces = [arena.take((2, 3, 100), np.float64), arena.take((7,), np.int64)]
    assert _address(pieces[0]) == start and pieces[0].shape == (2, 3, 100)
    assert pieces[1].dtype == np.int64 and _address(pieces[1]) % ALIGNMENT == 0


def test_a_view_lent_with_its_array_keeps_their_bytes_lent():
    """A slice of a lent array handed to TensorFlow without a copy (lms/device/host_store.py
    `get_slice`) refers to the region, not to the array: lent with it, their bytes come back
    only once neither is referred to."""
    arena = HostArena(4 * KIB)
    array = arena.take((1024,), np.float32)  # the whole region
    view = array[256:512]
    assert arena.owns(array) and arena.lend_view(array, view)
    assert not arena.lend_view(np.ones(4, np.float32), view)  # not the arena's
    del array
    assert arena.take((16,), np.uint8) is None  # the view is still referred to
    del view
    assert arena.take((16,), np.uint8) is not None
