"""The host's side of the CPU-GPU link, measured for its description (issue 14): copy bandwidth
at sizes from 1 MiB to 1 GiB (what LMS's swaps move), and on a GPU host the topology NVML
reports (PCIe generation and width, NVLink links and what they reach, GPUs sharing a PCIe switch).

On a CPU host (the emulated device) the one copy there is is host memory to host memory, which
bounds the host store's swaps: `memcpy` is measured everywhere. The GPU parts need a GPU and its
driver; they are small and marked so, and return None elsewhere.
"""

import time

SIZES = (2**20, 2**23, 2**26, 2**28, 2**30)  # 1 MiB, 8 MiB, 64 MiB, 256 MiB, 1 GiB


def _best_seconds(copy, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        copy()
        best = min(best, time.perf_counter() - started)
    return best


def _repeats(size: int) -> int:
    return 3 if size >= 2**28 else 10


def measure_memcpy(sizes=SIZES) -> list[float]:
    """GB/s of one host-memory copy per size (the best of a few). Plain bytearrays, whose slice
    assignment is one memcpy: no numpy, which an image without TensorFlow lacks."""
    rates = []
    for size in sizes:
        source, target = bytearray(b"\x01") * size, bytearray(size)
        view = memoryview(target)

        def copy(view=view, source=source):
            view[:] = source

        rates.append(size / _best_seconds(copy, _repeats(size)) / 1e9)
        view.release()
        del source, target
    return rates


def copy_functions(device: str, host: str = "/device:CPU:0"):
    """GPU only (runs on two logical CPU devices too, where nothing is copied): the copies a swap
    makes, as tf.functions. (round_trip, to_host, to_device):

    - round_trip(x), x on `device`: an Identity on `host` reads x (device to host: the
      partitioner's `_Recv` on the host, whose buffer TensorFlow takes from the pinned allocator
      as it does for a GPU tensor), then an Identity on `device` reads that (host to device, from
      the pinned buffer): a swap-out and its swap-in;
    - to_host(x) and to_device(h): each copy alone, for the wall clock; `h`, an output of
      to_host, is a pinned buffer.

    Each Identity is returned: Grappler's dependency optimizer bypasses an Identity that bridges
    two devices and is not fetched (../shared/gpu-desk-check.md B2). It may still bypass the
    device-side one (a function returns its `_Retval`, placed before Grappler ran, on the
    device); the copy stays, into that `_Retval`, from the host Identity's buffer (checked on two
    logical CPU devices: tests/suite/hosts/test_link.py)."""
    import tensorflow as tf

    @tf.function
    def round_trip(x):
        with tf.device(host):
            on_host = tf.identity(x)
        with tf.device(device):
            back = tf.identity(on_host)
        return on_host, back

    @tf.function
    def to_host(x):
        with tf.device(host):
            return tf.identity(x)

    @tf.function
    def to_device(h):
        with tf.device(device):
            return tf.identity(h)

    return round_trip, to_host, to_device


def best_copy_seconds(copies) -> dict:
    """{"out" (device to host) / "in": seconds} of the fastest copy each way among a profiled
    run's copy events (`lms.StepProfile.copies`, named "MemcpyD2H" / "MemcpyH2D" by the CUPTI
    collector: the copy engine's own durations)."""
    best = {}
    for copy in copies:
        direction = "out" if "D2H" in copy.type else "in" if "H2D" in copy.type else None
        if direction is not None:
            best[direction] = min(best.get(direction, float("inf")), copy.duration)
    return best


def measure_gpu_copies(index: int, sizes=SIZES, device: str | None = None) -> dict:
    """GPU only: GB/s host->device and device->host per size for GPU `index` (or `device`),
    copied as swaps copy: inside a tf.function, between the GPU and the host's `_Recv` of a GPU
    tensor, which TensorFlow allocates pinned (`copy_functions`). Timed by the copy events of a
    profiled run per size (the fastest of a few copies each way: the copy engine's own time),
    else, where the profiler records no copy (no CUPTI, or two logical CPU devices), by the wall
    clock of each copy alone. `timed_by` says which. `pinned`: the host side is the
    partitioner's `_Recv` of a GPU tensor, which TensorFlow takes from its pinned allocator (the
    GPU test checks the copy events' memory kind, tests/suite/hosts/test_link.py); None
    off a GPU."""
    import tensorflow as tf

    import lms

    device = device or f"/device:GPU:{index}"
    round_trip, to_host, to_device = copy_functions(device)
    seconds, timed_by = {}, "copy events"
    for size in sizes:
        with tf.device(device):
            source = tf.ones([size // 4], tf.float32)
        round_trip(source)  # traced and instantiated outside the profile

        def copies(source=source, repeats=_repeats(size)):  # noqa: B008 (bound per size)
            for _ in range(repeats):
                round_trip(source)

        best = best_copy_seconds(lms.profile_step(copies).copies)
        if set(best) != {"out", "in"}:
            timed_by = "wall time"
            on_host = to_host(source)
            to_device(on_host)
            best = {
                "out": _best_seconds(lambda x=source: to_host(x), _repeats(size)),
                "in": _best_seconds(lambda h=on_host: to_device(h), _repeats(size)),
            }
        seconds.update({(direction, size): best[direction] for direction in best})
    return {
        "index": index,
        "host_to_device_gbps": [size / seconds["in", size] / 1e9 for size in sizes],
        "device_to_host_gbps": [size / seconds["out", size] / 1e9 for size in sizes],
        "pinned": True if "GPU" in device.upper() else None,  # TensorFlow's rule, not measured
        "timed_by": timed_by,
    }


def gpu_topology(pynvml, handle, handles) -> dict:
    """GPU only: how GPU `handle` reaches the CPU, from NVML; None where NVML cannot say."""
    names = ("pcie_generation", "pcie_width", "nvlink_links", "nvlink_to_cpu")
    topology = dict.fromkeys((*names, "gpus_sharing_pcie_switch"))
    try:
        topology["pcie_generation"] = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)
        topology["pcie_width"] = pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)
    except pynvml.NVMLError:
        pass
    active, to_cpu = 0, 0
    try:
        for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
            if pynvml.nvmlDeviceGetNvLinkState(handle, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            active += 1
            try:  # an NVLink to an IBM NPU is the POWER9 CPU's own NVLink
                kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(handle, link)
                to_cpu += kind == getattr(pynvml, "NVML_NVLINK_DEVICE_TYPE_IBMNPU", 1)
            except (pynvml.NVMLError, AttributeError):
                pass
    except pynvml.NVMLError:
        pass
    topology["nvlink_links"] = active
    topology["nvlink_to_cpu"] = to_cpu
    try:  # other GPUs behind the same PCIe switch share its uplink to the CPU
        same_switch = (pynvml.NVML_TOPOLOGY_SINGLE, pynvml.NVML_TOPOLOGY_MULTIPLE)
        topology["gpus_sharing_pcie_switch"] = sum(
            pynvml.nvmlDeviceGetTopologyCommonAncestor(handle, other) in same_switch
            for other in handles
            if other is not handle
        )
    except pynvml.NVMLError:
        pass
    return topology


def describe_link(gpu_count: int) -> dict:
    """The description's `link`: copy bandwidths per size, host memory and per GPU."""
    gpus = [measure_gpu_copies(i) for i in range(gpu_count)] if gpu_count else []
    return {
        "sizes_bytes": list(SIZES),
        "memcpy_gbps": measure_memcpy(),
        "gpus": gpus,
    }
