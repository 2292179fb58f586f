"""One region of host memory the emulated device's host store cuts its RAM arrays from, so that
after a plan's first step its copies write into pages already faulted in.

Copying into fresh memory costs a page fault per 4 KiB page: a swap-out's copy ran at 1.4-1.7
GB/s into a new array, 12 GB/s into one used before (benchmarks/swap_overhead.py). Arrays of
a split step's pieces are larger than malloc keeps for reuse (32 MiB), so each new one was
mapped afresh. Pooling freed arrays by their shape did not keep up: GoogLeNet 2048² split in
400 MiB asks for 7.7 GB of host arrays a step, 3.6 times what the store holds at once, in
shapes that vary through the step, and 2.2 GB a step still went to fresh pages. Cut from one
region with a best-fit free list, any array reuses any freed bytes.

An array is lent, not given: TensorFlow wraps an array a py_func returns without copying it,
until the op that reads it is done. Its bytes go back to the free list only once nothing but
the arena refers to the array (its reference count), checked when the free list has no room
(`take`), so the check costs nothing while there is room. A view of a lent array does not
refer to it (NumPy makes the region its base): a view handed to TensorFlow is lent with its
array (`lend_view`), and their bytes come back once neither is referred to. A region is never
resized: when it is full of arrays in use, `take` says None and the caller allocates as before.
"""

import bisect
import sys

import numpy as np

ALIGNMENT = 64  # TensorFlow's buffers are 64-byte aligned (EIGEN_MAX_ALIGN_BYTES)
PAGE = 4096


class HostArena:
    """`capacity` bytes of host memory, mapped now and faulted in as arrays first use it."""

    def __init__(self, capacity: int):
        self.capacity = -(-int(capacity) // ALIGNMENT) * ALIGNMENT
        raw = np.empty(self.capacity + PAGE, dtype=np.uint8)
        start = -raw.ctypes.data % PAGE
        self._region = raw[start : start + self.capacity]
        self._base = self._region.ctypes.data
        self._free = [(0, self.capacity)]  # (offset, bytes), by offset, none adjacent
        self._lent = {}  # offset -> [the array lent there, views of it lent since]
        self._sizes = {}  # offset -> its bytes (rounded up to ALIGNMENT)

    @property
    def lent_bytes(self) -> int:
        """Bytes of the arrays lent and not found free yet."""
        return sum(self._sizes.values())

    def take(self, shape, dtype) -> np.ndarray | None:
        """An uninitialised, aligned array of `shape` and `dtype` cut from the region, or None
        when no free bytes fit it, even after taking back the arrays nothing else refers to."""
        dtype = np.dtype(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        size = max(ALIGNMENT, -(-count * dtype.itemsize // ALIGNMENT) * ALIGNMENT)
        offset = self._best_fit(size)
        if offset is None and self._reclaim():
            offset = self._best_fit(size)
        if offset is None:
            return None
        span = self._region[offset : offset + count * dtype.itemsize]
        array = span.view(dtype).reshape(shape)
        self._lent[offset], self._sizes[offset] = [array], size
        return array

    def owns(self, array: np.ndarray) -> bool:
        """Whether `array`'s bytes are the region's."""
        return 0 <= array.ctypes.data - self._base < self.capacity

    def lend_view(self, array: np.ndarray, view: np.ndarray) -> bool:
        """Lend `view` (of `array`, lent by `take`) with it: their bytes come back once nothing
        refers to either. False: `array` is not lent from here."""
        holders = self._lent.get(array.ctypes.data - self._base)
        if holders is None or holders[0] is not array:
            return False
        holders.append(view)
        return True

    def _best_fit(self, size: int) -> int | None:
        """Cut `size` bytes from the smallest free block that holds them: its offset."""
        best = None
        for k, (_, free) in enumerate(self._free):
            if free >= size and (best is None or free < self._free[best][1]):
                best = k
                if free == size:
                    break
        if best is None:
            return None
        offset, free = self._free[best]
        if free == size:
            del self._free[best]
        else:
            self._free[best] = (offset + size, free - size)
        return offset

    def _reclaim(self) -> bool:
        """Take back every lent array nothing else refers to: whether any was."""
        found = False
        for offset, holders in list(self._lent.items()):
            # each referenced by the list and getrefcount's argument alone: free
            if all(sys.getrefcount(holders[k]) <= 2 for k in range(len(holders))):
                del self._lent[offset]
                self._give_back(offset, self._sizes.pop(offset))
                found = True
        return found

    def _give_back(self, offset: int, size: int) -> None:
        """Return `size` bytes at `offset` to the free list, merged with free neighbours."""
        k = bisect.bisect(self._free, (offset, 0))
        if k < len(self._free) and self._free[k][0] == offset + size:  # the next block
            size += self._free.pop(k)[1]
        if k > 0 and sum(self._free[k - 1]) == offset:  # the previous block
            offset, size = self._free[k - 1][0], self._free[k - 1][1] + size
            k -= 1
            del self._free[k]
        self._free.insert(k, (offset, size))
