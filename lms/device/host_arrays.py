"""Where the emulated device's host store keeps its arrays: 64-byte aligned host memory cut
from one region a plan's arrays reuse (lms/device/host_arena.py), and, with a disk directory
(the `host_disk` option), memory-mapped files beyond the RAM the plan may take, so that what a
step holds on the host is bounded by the disk and not by RAM (issue 44).

Why memory-mapped files and not reads and writes: an array on disk is still an array, so the
store's slice reads, piece writes and swap-ins work on it unchanged, and the kernel's page cache
keeps what fits in memory while writing the rest back. Each file is unlinked as soon as it is
mapped (`tempfile.TemporaryFile`): nothing is left on the disk when the array is freed or the
process ends, however it ends."""

import logging
import math
import os
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from lms.device.host_arena import ALIGNMENT, HostArena
from lms.values.budget import format_size
from lms.values.link import Link

log = logging.getLogger("lms")

DISK_PROBE_BYTES = 256 * 2**20  # what `measure_disk` writes and reads back
DISK_PROBE_CHUNK = 16 * 2**20  # ... through one buffer of this size
# the arena a plan's RAM arrays are cut from: its simulated host peak times this
ARENA_SLACK = 1.25


def measure_disk(directory, nbytes: int = DISK_PROBE_BYTES) -> Link:
    """The disk under `directory` as a link: `out_bandwidth` its write speed through a mapped
    file to the disk (msync and fsync: the swap-outs' direction once the page cache is full),
    `bandwidth` its read speed with the file's pages dropped from the page cache first (the
    swap-ins' direction). Incompressible bytes, one file, unlinked once opened, moved through
    one buffer of DISK_PROBE_CHUNK (a plan spills where RAM is short)."""
    chunk = min(nbytes, DISK_PROBE_CHUNK)
    nbytes -= nbytes % chunk
    data = np.random.default_rng(0).integers(0, 256, chunk, dtype=np.uint8)
    back = np.empty_like(data)
    with tempfile.TemporaryFile(dir=directory) as file:
        os.posix_fallocate(file.fileno(), 0, nbytes)
        mapped = np.memmap(file, dtype=np.uint8, mode="r+", shape=(nbytes,))
        started = time.perf_counter()
        for start in range(0, nbytes, chunk):
            np.copyto(mapped[start : start + chunk], data)
        mapped.flush()
        os.fsync(file.fileno())
        written = time.perf_counter() - started
        del mapped
        os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        mapped = np.memmap(file, dtype=np.uint8, mode="r", shape=(nbytes,))
        read, same = 0.0, True
        for start in range(0, nbytes, chunk):
            started = time.perf_counter()
            np.copyto(back, mapped[start : start + chunk])
            read += time.perf_counter() - started
            same = same and np.array_equal(back, data)
        del mapped
    if not same:
        raise OSError(f"the disk under {directory} did not give back the bytes written")
    return Link(nbytes / read, 0.0, nbytes / written)


def aligned_copy(array: np.ndarray) -> np.ndarray:
    """A copy of `array` in 64-byte aligned memory: TensorFlow wraps such an array returned by a
    numpy_function without copying it, and copies any other into a buffer of its allocator (an
    allocation no op is named for, beside the swap-in's own copy)."""
    copy = aligned_empty(array.shape, array.dtype)
    np.copyto(copy, array)
    return copy


def aligned_empty(shape, dtype) -> np.ndarray:
    """An uninitialised array in 64-byte aligned memory (see `aligned_copy`)."""
    dtype = np.dtype(dtype)
    nbytes = math.prod(shape) * dtype.itemsize
    raw = np.empty(nbytes + ALIGNMENT, dtype=np.uint8)
    offset = -raw.ctypes.data % ALIGNMENT
    return raw[offset : offset + nbytes].view(dtype).reshape(shape)


class HostArrays:
    """The store's arrays: in RAM (from the plan's arena) while the RAM ones stay within
    `ram_limit_bytes`, beyond it in memory-mapped files in `disk` (None: no disk, everything in
    RAM).

    `ram_limit_bytes` is set for each plan (`allow`) from the host's memory
    (lms/device/host_memory.py `check_host_memory` with a disk); None: no limit. Counts the
    bytes each tier holds and the most the disk held (`take_disk_peak`)."""

    def __init__(self, disk: str | Path | None = None):
        self.disk = Path(disk) if disk is not None else None
        self.ram_limit_bytes = None
        self.ram_bytes = self.disk_bytes = self._disk_peak = 0
        self._disk_link = None
        self._arena = None  # HostArena: made for a plan by `allow`
        self._missed = False  # an array was cut afresh since the last `outgrown`: no room
        self._lock = threading.Lock()

    @property
    def disk_link(self) -> Link | None:
        """The disk's speed (`measure_disk`), measured the first time it is asked; None: no
        disk."""
        if self.disk is not None and self._disk_link is None:
            self._disk_link = measure_disk(self.disk)
        return self._disk_link

    @property
    def measured_link(self) -> Link | None:
        """The disk's speed if `disk_link` measured it already (a plan spilled); None otherwise.
        Reading it measures nothing."""
        return self._disk_link

    def allow(self, ram_limit_bytes: int | None, host_peak_bytes: int) -> None:
        """A new plan: its arrays may fill `ram_limit_bytes` of RAM (None: no limit). When its
        simulated host peak is over that, say how much goes to the disk and what moving it
        costs: each byte written once and read back once at the disk's measured speed (an
        estimate: the page cache keeps some, and writes back while the step computes; ResNet50
        1024² split, 1.5 GiB on the disk: 9.7 s estimated, 7.1 s measured a step,
        benchmarks/lms_host_disk.py)."""
        self.ram_limit_bytes = ram_limit_bytes
        # the arena: the plan's host peak and a quarter for the free list's gaps and the
        # pieces' read copies in flight (no more than the RAM allowed); one at least as large
        # stays (another input signature's plan uses it too)
        capacity = int(host_peak_bytes * ARENA_SLACK)
        if ram_limit_bytes is not None and self.disk is not None:
            capacity = min(capacity, ram_limit_bytes)
        with self._lock:
            if capacity > 0 and (self._arena is None or self._arena.capacity < capacity):
                self._arena = HostArena(capacity)
        if ram_limit_bytes is None or host_peak_bytes <= ram_limit_bytes or self.disk is None:
            return
        spilled, disk = host_peak_bytes - ram_limit_bytes, self.disk_link
        log.info(
            "LMS: the host store keeps up to %s of the plan's %s host arrays on the disk %s "
            "(%.2f GB/s written, %.2f read: about %.1f s a step to write and read them)",
            format_size(spilled),
            format_size(host_peak_bytes),
            self.disk,
            disk.out_bandwidth / 1e9,
            disk.bandwidth / 1e9,
            spilled / disk.out_bandwidth + spilled / disk.bandwidth,
        )

    @property
    def arena_bytes(self) -> int:
        """The bytes of the plan's arena (0: none yet)."""
        return self._arena.capacity if self._arena is not None else 0

    def _fits_ram(self, nbytes: int) -> bool:  # under the lock
        limit = self.ram_limit_bytes
        return self.disk is None or limit is None or self.ram_bytes + nbytes <= limit

    def _place(self, nbytes: int) -> bool:
        """Count `nbytes` on the tier it goes to: True for the disk."""
        with self._lock:
            to_disk = nbytes > 0 and not self._fits_ram(nbytes)
            if to_disk:
                self.disk_bytes += nbytes
                self._disk_peak = max(self._disk_peak, self.disk_bytes)
            else:
                self.ram_bytes += nbytes
            return to_disk

    def empty(self, shape, dtype) -> np.ndarray:
        """An uninitialised array of `shape` and `dtype` the store keeps: cut from the plan's
        arena when the RAM has room for it (else a new one), or a file on the disk beyond."""
        dtype = np.dtype(dtype)
        shape = tuple(int(n) for n in shape)
        nbytes = math.prod(shape) * dtype.itemsize
        with self._lock:
            if self._arena is not None and self._fits_ram(nbytes):
                reused = self._arena.take(shape, dtype)
                if reused is not None:
                    self.ram_bytes += nbytes
                    return reused
                self._missed = True
        if not self._place(nbytes):
            return aligned_empty(shape, dtype)  # (no arena yet, or it is full)
        try:
            with tempfile.TemporaryFile(dir=self.disk) as file:  # unlinked: freed with the map
                # the blocks reserved now: a full disk is this OSError (ENOSPC), not a SIGBUS
                # that kills the process when a write into the mapping finds no block
                os.posix_fallocate(file.fileno(), 0, nbytes)
                return np.memmap(file, dtype=dtype, mode="w+", shape=shape)
        except OSError as error:
            with self._lock:
                self.disk_bytes -= nbytes
            raise OSError(
                error.errno,
                f"LMS's host disk {self.disk} could not take {nbytes} bytes more "
                f"({error.strerror}); it held {self.disk_bytes} of this step's bytes",
            ) from error

    def copy(self, array: np.ndarray) -> np.ndarray:
        """A copy of `array` the store keeps (into `empty`'s array)."""
        copy = self.empty(array.shape, array.dtype)
        np.copyto(copy, array)
        return copy

    def read_view(self, array: np.ndarray, view: np.ndarray) -> np.ndarray:
        """`view` (a slice of the store's `array` a piece reads) as TensorFlow may wrap it
        without a copy (64-byte aligned, contiguous, in RAM), lent with `array` when the arena's;
        else `read_copy` of it. (GoogLeNet 4096² split reads 43 GB of slices a step.)"""
        on_disk = isinstance(array, np.memmap)
        if on_disk or not view.flags.c_contiguous or view.ctypes.data % ALIGNMENT:
            return self.read_copy(view)
        with self._lock:
            arena = self._arena
            if arena is None or not arena.owns(array) or arena.lend_view(array, view):
                return view  # (an array not the arena's is never cut again: its view is safe)
        return self.read_copy(view)

    def read_copy(self, array: np.ndarray) -> np.ndarray:
        """An aligned copy of `array` (a slice a piece reads) that the store hands to TensorFlow
        and does not keep: from the arena when it has room, freed there once TensorFlow lets it
        go."""
        with self._lock:
            copy = self._arena.take(array.shape, array.dtype) if self._arena is not None else None
            self._missed = self._missed or (copy is None and self._arena is not None)
        if copy is None:
            return aligned_copy(array)
        np.copyto(copy, array)
        return copy

    def free(self, array: np.ndarray) -> None:
        """The store no longer keeps `array`: a RAM array's bytes go back to the arena once
        TensorFlow no longer refers to it either; a mapped file is dropped (unmapped, and so
        deleted, once TensorFlow's last reference to it goes)."""
        with self._lock:
            if isinstance(array, np.memmap):
                self.disk_bytes -= array.nbytes
            else:
                self.ram_bytes -= array.nbytes

    def drop_arena(self) -> int:
        """Let the arena go (its pages back to the host once the arrays cut from it are gone)
        before a new plan is checked against what the host has available: else a closed loop's
        next plan counted the last one's arena as taken (GoogLeNet 4096² in 400 MiB: refused at
        10.0 GiB available on this 24 GiB machine). Returns its bytes."""
        with self._lock:
            dropped = self.arena_bytes
            self._arena = None
        return dropped

    def outgrown(self, held_peak_bytes: int) -> int:
        """After a step: when some of its arrays found no room in the arena (cut afresh, each
        page faulted in as it is written), the capacity of one for the bytes the store held at
        its peak, `held_peak_bytes`, and ARENA_SLACK more (within the RAM allowed), if that is
        larger; else 0. The simulated host peak the arena is first made for can be short of
        what the store holds: the executor can run beside each other ops the simulated order
        runs apart (tests/lms/device/test_host_memory.py saw 1.5x once in 36 runs). Before the
        analysis held an array a loop filled until its last reader, the 3D U-Net 144³ split
        simulated 6.8 GiB and held 12.0: 7.1 GB a step cut afresh and its pieces stored at
        1.1 GB/s, 3.5 with room for them (102 s a step, 79). The caller makes it (`HostStore`:
        the old region let go first)."""
        with self._lock:
            missed, self._missed = self._missed, False
            if not missed or self._arena is None:
                return 0
            capacity = int(held_peak_bytes * ARENA_SLACK)
            if self.ram_limit_bytes is not None and self.disk is not None:
                capacity = min(capacity, self.ram_limit_bytes)
            return capacity if capacity > self._arena.capacity else 0

    def make_arena(self, capacity: int) -> None:
        """A new arena of `capacity` bytes in place of the plan's (`outgrown`)."""
        with self._lock:
            self._arena = HostArena(capacity)

    def clear(self) -> None:
        """The store dropped every array it held (`HostStore.clear`)."""
        with self._lock:
            self.ram_bytes = self.disk_bytes = 0

    @property
    def disk_peak_bytes(self) -> int:
        """The most bytes the disk held at once since the last `take_disk_peak` (not reset)."""
        with self._lock:
            return self._disk_peak

    def take_disk_peak(self) -> int:
        """The most bytes the disk held at once since the last call."""
        with self._lock:
            peak, self._disk_peak = self._disk_peak, self.disk_bytes
        return peak
