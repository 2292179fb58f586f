"""lms/device/host_arrays.py: the host store's arrays stay in RAM up to the limit the plan's host
memory allows and go to memory-mapped files on the disk beyond it, each file gone from the
directory as soon as it is mapped; a plan's RAM arrays reuse its arena, disk ones do not; the
store's swaps and pieces keep their bytes on either tier; the disk is measured as a link, and a plan
that spills says what moving its bytes costs. Marked compat: also run on TensorFlow 2.14.1."""

import logging
import os
import subprocess

import numpy as np
import pytest
from process_maps import mapped

import lms
from lms.device.host_arrays import ALIGNMENT, HostArrays, measure_disk
from lms.device.host_store import HostStore

pytestmark = pytest.mark.compat
MIB = 2**20


def _block(value: float) -> np.ndarray:
    return np.full((256, 1024), value, dtype=np.float32)  # 1 MiB


def test_arrays_stay_in_ram_up_to_the_limit_and_go_to_the_disk_beyond_it(tmp_path):
    arrays = HostArrays(tmp_path)
    arrays.ram_limit_bytes = 2 * MIB
    kept = [arrays.copy(_block(k)) for k in range(5)]
    on_disk = [isinstance(a, np.memmap) for a in kept]
    assert on_disk == [False, False, True, True, True]
    assert (arrays.ram_bytes, arrays.disk_bytes) == (2 * MIB, 3 * MIB)
    assert [float(a[7, 9]) for a in kept] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert os.listdir(tmp_path) == []  # unlinked once mapped: nothing to clean up, ever
    assert all(a.ctypes.data % ALIGNMENT == 0 for a in kept)
    arrays.free(kept.pop())
    assert arrays.disk_peak_bytes == 3 * MIB  # read, not reset
    assert arrays.disk_bytes == 2 * MIB and arrays.take_disk_peak() == 3 * MIB
    assert arrays.take_disk_peak() == 2 * MIB  # the peak starts again from what is held


def test_freed_ram_arrays_are_reused_but_never_past_the_limit(tmp_path):
    arrays = HostArrays(tmp_path)
    arrays.allow(1 * MIB, 2 * MIB)  # an arena of the RAM allowed (the peak's 1.25x is more)
    assert arrays.arena_bytes == 1 * MIB
    first = arrays.copy(_block(1))
    address = first.ctypes.data
    arrays.free(first)
    del first
    again = arrays.copy(_block(2))  # the arena's bytes again, the RAM has room again
    assert again.ctypes.data == address and not isinstance(again, np.memmap)
    beyond = arrays.copy(_block(3))  # RAM full: the arena's bytes would pass the limit
    assert isinstance(beyond, np.memmap) and arrays.ram_bytes == 1 * MIB
    arrays.free(beyond)
    assert arrays.disk_bytes == 0 and arrays.ram_bytes == 1 * MIB


def test_a_plans_arrays_and_its_pieces_read_copies_reuse_its_arena():
    """Each plan's arrays are cut from one arena of 1.25x its simulated host peak, so after
    the first step they write into pages faulted in already; a read copy (a slice a piece
    reads, handed to TensorFlow) too, and its bytes come back once TensorFlow lets it go. A
    larger plan gets a larger arena; a smaller one keeps the arena it finds."""
    arrays = HostArrays()
    kept = arrays.copy(_block(1))  # no plan yet: no arena, a new array
    arrays.allow(None, int(4.8 * MIB) + 1)
    assert arrays.arena_bytes == 6 * MIB
    cut = [arrays.copy(_block(k)) for k in range(5)]
    low, high = min(a.ctypes.data for a in cut), max(a.ctypes.data for a in cut)
    assert high - low == 4 * MIB and not low <= kept.ctypes.data <= high
    read = arrays.read_copy(cut[0][:128])  # 512 KiB, after the five
    assert read.ctypes.data == low + 5 * MIB and float(read[5, 5]) == 0.0
    assert arrays.ram_bytes == 6 * MIB  # a read copy is not the store's to count
    address = read.ctypes.data
    del read
    for array in cut:
        arrays.free(array)
    del cut, array
    again = [arrays.copy(_block(k)) for k in range(5)]
    assert {a.ctypes.data for a in again} <= {low + k * MIB for k in range(5)} | {address}
    arrays.allow(None, 1 * MIB)
    assert arrays.arena_bytes == 6 * MIB
    arrays.allow(None, 8 * MIB)
    assert arrays.arena_bytes == 10 * MIB


def test_a_new_plan_lets_the_arena_go():
    """The closed loop drops the arena before it plans again (lms/closed_loop.py), so that its
    host memory check sees the last plan's arena as available: its pages go back to the host
    once the arrays cut from it are gone."""
    arrays = HostArrays()
    arrays.allow(None, 64 * MIB)
    kept = arrays.copy(np.ones((16, 1024, 1024), np.float32))  # faults in 64 MiB of it
    arrays.free(kept)
    del kept
    base = arrays._arena._base
    assert mapped(base)
    assert arrays.drop_arena() == 80 * MIB and arrays.arena_bytes == 0
    # its mapping is gone (unmapped: its pages are the host's again). Not the process's RSS,
    # which other threads of a long test run move by more than the arena (a failure in CI)
    assert not mapped(base)


def test_without_a_disk_or_a_limit_everything_stays_in_ram(tmp_path):
    for arrays in (HostArrays(), HostArrays(tmp_path)):
        arrays.ram_limit_bytes = None if arrays.disk else 0
        kept = [arrays.copy(_block(k)) for k in range(3)]
        assert not any(isinstance(a, np.memmap) for a in kept) and arrays.disk_bytes == 0


def test_the_stores_swaps_and_pieces_read_back_what_they_kept_on_the_disk(tmp_path):
    store = HostStore(disk=tmp_path)
    store.arrays.ram_limit_bytes = 0  # everything on the disk
    swapped = _block(5)
    handle = store._put(swapped, 1)
    assert store.arrays.disk_bytes == MIB and store.held_bytes == MIB
    back = store._get(handle)
    assert isinstance(back, np.memmap) and np.array_equal(back, swapped)
    assert store.arrays.disk_bytes == 0 and store.held_bytes == 0
    # a split op's output written in two slices, then read whole
    key = store.put_slice(np.array([-1]), _block(6)[:128], 0, 0, (256, 1024), 1)
    store.put_slice(key, _block(7)[128:], 0, 128, (256, 1024), 1)
    whole = store.get_whole(key)
    assert float(whole[0, 0]) == 6.0 and float(whole[255, 0]) == 7.0
    assert store.arrays.take_disk_peak() == MIB
    store.clear()
    assert store.arrays.disk_bytes == 0 and os.listdir(tmp_path) == []


def test_the_disk_is_measured_as_a_link_and_a_plan_that_spills_says_what_it_costs(tmp_path, caplog):
    link = measure_disk(tmp_path, nbytes=8 * MIB)
    assert link.out_bandwidth > 0 and link.bandwidth > 0 and link.latency == 0
    assert os.listdir(tmp_path) == []
    arrays = HostArrays(tmp_path)
    assert arrays.measured_link is None  # reading it measures nothing
    arrays._disk_link = lms.Link(2e9, 0, 1e9)  # a known disk: the cost below is exact
    assert arrays.measured_link == lms.Link(2e9, 0, 1e9)
    with caplog.at_level(logging.INFO, logger="lms"):
        arrays.allow(1000 * MIB, 1000 * MIB)  # fits the RAM: nothing said
        assert not caplog.records
        arrays.allow(1000 * MIB, 3000 * MIB)
    assert arrays.ram_limit_bytes == 1000 * MIB
    message = caplog.records[-1].getMessage()
    assert "keeps up to 1.95 GiB of the plan's 2.93 GiB host arrays on the disk" in message
    seconds = 2000 * MIB / 1e9 + 2000 * MIB / 2e9
    assert f"(1.00 GB/s written, 2.00 read: about {seconds:.1f} s a step" in message
    assert HostArrays().disk_link is None


def test_a_full_disk_is_an_error_naming_it_not_a_crash(tmp_path):
    """A 1 MiB tmpfs (mounted as root; skipped elsewhere) as the disk: a 2 MiB array does not
    fit. Without its blocks reserved, the write into the mapping would kill the process with
    SIGBUS; here it is an OSError, and the disk's count is as before."""
    small = tmp_path / "small"
    small.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(small)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        arrays = HostArrays(small)
        arrays.ram_limit_bytes = 0
        with pytest.raises(OSError, match=f"host disk {small} could not take 2097152 bytes"):
            arrays.copy(np.ones((512, 1024), np.float32))
        assert arrays.disk_bytes == 0
        kept = arrays.copy(np.ones((128, 1024), np.float32))  # 0.5 MiB still fits
        assert isinstance(kept, np.memmap) and arrays.disk_bytes == 2**19
        del kept
    finally:
        subprocess.run(["umount", str(small)], check=False)
