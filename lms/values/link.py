"""The CPU–GPU link: its description (bandwidth per direction and latency) and, on the emulated
device, a link that really delays the host store's copies.

A GPU's copy engines move one transfer at a time per direction; a transfer of n bytes takes
`latency + n / bandwidth`. `EmulatedLink` does the same with wall-clock time: each transfer
reserves its direction's engine from the moment it is asked for (or when the engine frees up)
for that long. As on a GPU, only the swap-in waits for its transfer: a swap-out returns once its
host copy is done and its transfer booked (the compute stream goes on), its tensor's buffer kept
alive until that transfer is done (a GPU frees it once its copy has read it); a swap-in of that
tensor asks for its own transfer only then, and returns at the end of it (sleeping less by how
late `time.sleep` wakes up here, measured once per link, and spinning the rest). A swap-in
waits with `time.sleep`, which holds one of TensorFlow's inter-op threads but no core. Each
transfer's own duration is counted (`EmulatedLink.send`, `receive`): from when its engine began
it to its end, by the clock, and no sooner than its host copy is done; the swap traffic's
bandwidth is its bytes over those durations, never the swap ops' time.

No TensorFlow here: the suite checks a spec's `link` table with this module alone.
"""

import heapq
import itertools
import math
import re
import threading
import time
from dataclasses import dataclass

from lms.errors import ParameterError

_BANDWIDTH = re.compile(r"^\s*([0-9.eE+-]+)\s*([kmgt]i?b|b)\s*/\s*s\s*$", re.IGNORECASE)
_BYTES = {"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}
_BYTES.update({"kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40})
_DURATION = re.compile(r"^\s*([0-9.eE+-]+)\s*(ns|us|µs|ms|s)\s*$")
_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}
DIRECTIONS = ("out", "in")  # out: device to host (swap-out); in: host to device (swap-in)


def _parse_quantity(value, name, pattern, units, what, allow_zero):
    """A number with a unit of `units` (pattern groups: number, unit), or a bare number."""
    wrong = ParameterError(f"{name} must be {what}; received {value!r}")
    if isinstance(value, bool):
        raise wrong
    if isinstance(value, int | float):
        amount = float(value)
    elif isinstance(value, str) and (match := pattern.match(value)):
        try:
            amount = float(match.group(1)) * units[match.group(2).lower()]
        except ValueError:
            raise wrong from None
    else:
        raise wrong
    if not math.isfinite(amount) or amount < 0 or (amount == 0 and not allow_zero):
        raise wrong
    return amount


# A bare number below this is a bandwidth written without its unit ("16" meant 16GB/s): no
# CPU-GPU link moves less than a megabyte a second.
SLOWEST_LINK = 1e6


def parse_bandwidth(value, name: str = "bandwidth") -> float:
    """Bytes per second of "16GB/s", "12.5 GiB/s" or a number of bytes per second (1e6 or more:
    a smaller bare number is a unit forgotten, refused with a hint)."""
    what = "a bandwidth like '16GB/s' or '900MiB/s' (or bytes per second as a number)"
    amount = _parse_quantity(value, name, _BANDWIDTH, _BYTES, what, False)
    if not isinstance(value, str) and amount < SLOWEST_LINK:
        error = ParameterError(
            f"{name} {value!r} has no unit and is below 1 MB/s as bytes per second: "
            f"write e.g. {value:g}GB/s"
        )
        error.hint = f"{value:g}GB/s"
        raise error
    return amount


def parse_duration(value, name: str = "latency") -> float:
    """Seconds of "10us", "1.5ms", "0s" or a number of seconds (>= 0)."""
    what = "a duration like '10us', '2ms' or '0s' (or seconds as a number)"
    return _parse_quantity(value, name, _DURATION, _SECONDS, what, True)


@dataclass(frozen=True)
class Link:
    """A CPU–GPU link: bytes per second per direction, and the fixed cost of each transfer."""

    bandwidth: float  # bytes/s host to device (swap-ins), and the other way unless given
    latency: float = 0.0
    out_bandwidth: float | None = None  # bytes/s device to host (swap-outs), if it differs

    def __post_init__(self):
        object.__setattr__(self, "bandwidth", parse_bandwidth(self.bandwidth))
        object.__setattr__(self, "latency", parse_duration(self.latency))
        if self.out_bandwidth is not None:
            object.__setattr__(self, "out_bandwidth", parse_bandwidth(self.out_bandwidth))

    @classmethod
    def of(cls, value, name: str = "link") -> "Link":
        """A Link from a Link or a mapping {bandwidth, latency (default 0)}; one ParameterError
        naming the key otherwise."""
        if isinstance(value, Link):
            return value
        if not isinstance(value, dict):
            raise ParameterError(
                f"{name} must be a table like {{bandwidth = '16GB/s', latency = '10us'}}; "
                f"received {value!r}"
            )
        unknown = sorted(set(value) - {"bandwidth", "latency"})
        if unknown:
            raise ParameterError(
                f"{name} has unknown key(s) {unknown}; allowed: 'bandwidth', 'latency'"
            )
        if "bandwidth" not in value:
            raise ParameterError(f"{name} needs a bandwidth, e.g. '16GB/s'")
        return cls(
            parse_bandwidth(value["bandwidth"], f"{name}.bandwidth"),
            parse_duration(value.get("latency", 0.0), f"{name}.latency"),
        )

    def seconds(self, nbytes: int, direction: str = "in") -> float:
        """How long one transfer of `nbytes` occupies its direction ("in" or "out")."""
        rate = self.out_bandwidth if direction == "out" and self.out_bandwidth else self.bandwidth
        return self.latency + nbytes / rate

    def as_dict(self) -> dict:
        values = {"bandwidth": self.bandwidth, "latency": self.latency}
        if self.out_bandwidth is not None:
            values["out_bandwidth"] = self.out_bandwidth
        return values

    def describe(self) -> str:
        return f"{self.bandwidth / 1e9:g} GB/s, {self.latency * 1e6:g} us"


# Named CPU-GPU links, per direction, at the bandwidths public measurements give (pinned host
# memory; docs/lms.md "The link"), not the nominal peaks: host to device, then device to host where
# it differs. Latencies are typical one-way figures (an assumption: at the megabytes swapped,
# bandwidth decides).
LINKS = {
    "nvlink2": ("NVLink 2.0 CPU-GPU (POWER9, 3 bricks; 68 of 75 GB/s)", Link(68e9, 5e-6)),
    "pcie3": ("PCIe 3.0 x16 (12.2 / 12.9 of 15.75 GB/s)", Link(12.2e9, 10e-6, 12.9e9)),
    "pcie3-shared": (
        "PCIe 3.0 x16, two GPUs behind one switch, both copying",
        Link(6.1e9, 10e-6, 6.45e9),
    ),
    "pcie4": ("PCIe 4.0 x16 (~25 of 31.5 GB/s)", Link(25e9, 10e-6)),
    "pcie5": ("PCIe 5.0 x16 (~55.6 of 63 GB/s)", Link(55.6e9, 10e-6)),
    "nvlink-c2c": ("NVLink-C2C (Grace Hopper; 375 / 297 of 450 GB/s)", Link(375e9, 2e-6, 297e9)),
}


def named_links(names) -> dict:
    """{name: (description, Link)} for names of LINKS or bandwidths ("2GB/s": that bandwidth
    per direction, 10 us per transfer); one ParameterError naming what is allowed."""
    links = {}
    for name in names:
        if name in LINKS:
            links[name] = LINKS[name]
            continue
        try:
            link = Link(parse_bandwidth(name), 10e-6)
        except ParameterError:
            raise ParameterError(
                f"unknown link {name!r}; allowed: {', '.join(LINKS)}, or a bandwidth like '2GB/s'"
            ) from None
        links[name] = (f"{link.bandwidth / 1e9:g} GB/s per direction", link)
    return links


class EmulatedLink:
    """Copy engines for the host store: one transfer at a time per direction, in the order
    they are asked for (see the module docstring). A swap-out `send`s and goes on; a swap-in
    `receive`s and waits."""

    def __init__(self, link: Link):
        self.link = link
        self._free_at = dict.fromkeys(DIRECTIONS, 0.0)
        self._lock = threading.Lock()
        self.oversleep = _oversleep()
        # device buffers a swap-out's transfer still reads, freed at its end by `_release`
        self._reading, self._order = [], itertools.count()
        self._wake = threading.Condition(self._lock)
        self._releasing = False

    def reserve(self, direction: str, nbytes: int) -> tuple[float, float]:
        """Book a transfer now; return the `time.perf_counter()`s at which its engine begins it
        (now, or when the transfer before it is done) and at which it is done."""
        with self._lock:
            start = max(time.perf_counter(), self._free_at[direction])
            end = start + self.link.seconds(nbytes, direction)
            self._free_at[direction] = end
        return start, end

    def send(self, nbytes: int, work=None, reads=None) -> tuple:
        """A swap-out: book its device-to-host transfer, run `work()` meanwhile (the host copy,
        if any) and return without waiting for the transfer, as a GPU's compute stream goes on
        while its copy engine moves the tensor. `reads` (the swapped tensor's buffer) is kept
        alive until the transfer is done, as a GPU frees that memory only once its copy has read
        it. Returns (work's result, when the transfer is done, the seconds it took): done no
        sooner than the host copy either, timed from when its engine began it (not the queue
        before it), so a slow host copy counts."""
        start, end = self.reserve("out", nbytes)
        result = work() if work is not None else None
        end = max(end, time.perf_counter())
        if reads is not None:
            self._read_until(reads, end)
        return result, end, end - start

    def receive(self, nbytes: int, after: float = 0.0) -> float:
        """A swap-in: its host-to-device transfer, asked for once the bytes are on the host
        (`after`: when its swap-out's transfer is done; it waits until then), returning when it
        is done. The seconds it took: from when its engine began it to when the wait ended, so
        neither the wait for its swap-out nor the queue counts, and a late wake-up does."""
        self.wait_until(after)
        start, end = self.reserve("in", nbytes)
        self.wait_until(end)
        return max(0.0, time.perf_counter() - start)

    def wait_until(self, end: float) -> None:
        """Wait until `end`: `time.sleep` returns late by a fairly constant amount (70-90 us on
        a 2-core Linux VM), which over hundreds of swaps per step would be a slower link than
        the one asked for; so it sleeps that much less and spins the rest. Without the spin a
        transfer shorter than the lateness was not waited for at all (147 KB tensors crossed a
        2 GB/s link at 5 GB/s)."""
        remaining = end - time.perf_counter() - self.oversleep
        if remaining > 0:
            time.sleep(remaining)
        while time.perf_counter() < end:
            pass

    def _read_until(self, buffer, end: float) -> None:
        """Keep `buffer` referenced until `end` (a thread drops it then; late by a wake-up)."""
        with self._lock:
            heapq.heappush(self._reading, (end, next(self._order), buffer))
            if not self._releasing:
                self._releasing = True
                threading.Thread(target=self._release, name="lms-link", daemon=True).start()
            self._wake.notify()

    def _release(self) -> None:
        """Drop each buffer `_read_until` keeps at its end; stop after a second with none."""
        with self._lock:
            while True:
                if not self._reading:
                    self._wake.wait(1.0)
                    if not self._reading:
                        self._releasing = False
                        return
                    continue
                wait = self._reading[0][0] - time.perf_counter()
                if wait > 0:
                    self._wake.wait(wait)
                    continue
                done = heapq.heappop(self._reading)
                self._lock.release()  # the buffer's last reference may free TensorFlow's memory
                try:
                    del done
                finally:
                    self._lock.acquire()


def _oversleep(samples: int = 15) -> float:
    """How late `time.sleep(100 us)` returns here: the median over a few (~2 ms in all)."""
    late = []
    for _ in range(samples):
        started = time.perf_counter()
        time.sleep(1e-4)
        late.append(time.perf_counter() - started - 1e-4)
    return sorted(late)[len(late) // 2]
