"""Which chunk TensorFlow's BFC allocator gives each request, so that the simulator counts what the
allocator counts (docs/lms.md).

TensorFlow's device allocators (GPU, and the CPU with TF_CPU_ALLOCATOR_USE_BFC=true, the emulated
device) are best-fit with coalescing: requests are rounded up to 256 bytes and served from the
smallest free chunk that holds them (bins of powers of two, then by size and address); the chunk
is split only if it is at least twice the request (or 128 MiB larger), so a request can hold up to
twice its size, and bytes in use count whole chunks. Measured on the emulated device, that padding
was most of the simulator's remaining underestimate (6-7 % of the peak on MobileNetV2 and a
Transformer). Freed chunks merge with free neighbours; when nothing fits, a new region is added:
with memory growth (the CPU, or a GPU with allow_growth) regions start at 2 MiB and double; without
it, one region holds all the device memory. Kept: the placement rules. Left out: the allocator's
retry after freeing regions, and stream-ordered reuse (not used by TensorFlow's executor).
"""

import bisect
import os

MIN_ALLOCATION = 256
BINS = 21
MAX_INTERNAL_FRAGMENTATION = 128 << 20
FIRST_REGION = 2 << 20
UNLIMITED = 1 << 62


def rounded(size: int) -> int:
    return max(MIN_ALLOCATION, -(-int(size) // MIN_ALLOCATION) * MIN_ALLOCATION)


def bin_of(size: int) -> int:
    return min(max((size >> 8).bit_length() - 1, 0), BINS - 1)


def cpu_allocator_limit() -> int:
    """The bytes TensorFlow's CPU BFC allocator may hold (TF_CPU_BFC_MEM_LIMIT_IN_MB, 64 GiB
    by default): where its regions stop doubling."""
    try:
        mib = int(os.environ.get("TF_CPU_BFC_MEM_LIMIT_IN_MB", 1 << 16))
    except ValueError:
        mib = 1 << 16
    return mib << 20


class BestFitAllocator:
    """The placement of TensorFlow's BFC allocator (`tsl/framework/bfc_allocator.cc`) over
    addresses that are only numbers: `allocate` returns a handle and the chunk's size."""

    def __init__(
        self,
        limit: int | None = None,
        growth: bool = True,
        max_fragmentation: int = MAX_INTERNAL_FRAGMENTATION,
    ):
        """`max_fragmentation`: a chunk this much larger than the request is split even when it
        is less than twice the request (BFC's `fragmentation_fraction` x memory limit where set,
        a GPU's `internal_fragmentation_fraction`; else 128 MiB)."""
        self.limit = limit or UNLIMITED
        self.max_fragmentation = max_fragmentation
        self.region_bytes = rounded(min(self.limit, FIRST_REGION)) if growth else self.limit
        self.regions = 0  # bytes of all regions
        self.end = 0  # next free address: regions are placed apart, so never adjacent
        self.size = {}  # chunk address -> size
        self.used = set()  # addresses of chunks in use
        self.region_end = {}  # chunk address -> end of its region
        self.prev = {}  # chunk address -> previous chunk's address in its region (or None)
        self.bins = [[] for _ in range(BINS)]  # free chunks as sorted (size, address)
        self.in_use = 0
        self.peak = 0

    def allocate(self, size: int) -> tuple[int, int]:
        need = rounded(size)
        found = self._find(need)
        if found is None:
            self._extend(need)
            found = self._find(need)
        if found is None:  # beyond the limit: counted anyway, as a separate region
            self._add_region(need)
            found = self._find(need)
        address = found
        chunk = self.size[address]
        if chunk >= 2 * need or chunk - need >= self.max_fragmentation:
            self._split(address, need)
            chunk = need
        self.used.add(address)
        self.in_use += chunk
        self.peak = max(self.peak, self.in_use)
        return address, chunk

    def free(self, address: int) -> None:
        self.used.discard(address)
        self.in_use -= self.size[address]
        following = address + self.size[address]
        if following < self.region_end[address] and following not in self.used:
            self._unbin(following)
            self._merge(address, following)
        previous = self.prev[address]
        if previous is not None and previous not in self.used:
            self._unbin(previous)
            self._merge(previous, address)
            address = previous
        self._bin(address)

    def _find(self, need: int) -> int | None:
        for free in self.bins[bin_of(need) :]:
            k = bisect.bisect_left(free, (need, -1))
            if k < len(free):
                address = free.pop(k)[1]
                return address
        return None

    def _extend(self, need: int) -> None:
        available = self.limit - self.regions
        if need > available:
            return
        grown = False
        while need > self.region_bytes:
            self.region_bytes *= 2
            grown = True
        self._add_region(min(self.region_bytes, available))
        if not grown:
            self.region_bytes *= 2

    def _add_region(self, size: int) -> None:
        address = self.end
        self.end += size + MIN_ALLOCATION
        self.regions += size
        self.size[address] = size
        self.region_end[address] = address + size
        self.prev[address] = None
        self._bin(address)

    def _split(self, address: int, need: int) -> None:
        rest = address + need
        self.size[rest] = self.size[address] - need
        self.size[address] = need
        self.region_end[rest] = self.region_end[address]
        self.prev[rest] = address
        following = rest + self.size[rest]
        if following < self.region_end[address]:
            self.prev[following] = rest
        self._bin(rest)

    def _merge(self, address: int, following: int) -> None:
        """Join the free chunk at `following` into the one at `address` before it."""
        self.size[address] += self.size.pop(following)
        after = address + self.size[address]
        if after < self.region_end[address]:
            self.prev[after] = address
        del self.prev[following], self.region_end[following]

    def _bin(self, address: int) -> None:
        bisect.insort(self.bins[bin_of(self.size[address])], (self.size[address], address))

    def _unbin(self, address: int) -> None:
        free = self.bins[bin_of(self.size[address])]
        del free[bisect.bisect_left(free, (self.size[address], address))]
