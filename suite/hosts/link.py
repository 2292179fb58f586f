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


def measure_gpu_copies(index: int, sizes=SIZES) -> dict:
    """GPU only: GB/s host->device and device->host per size for GPU `index`, through
    TensorFlow's copies (its staging buffers: whether the host side is pinned is TensorFlow's
    choice, so `pinned` is not claimed)."""
    import tensorflow as tf

    to_device, to_host = [], []
    for size in sizes:
        with tf.device("CPU:0"):
            host = tf.ones([size // 4], tf.float32)
        with tf.device(f"GPU:{index}"):
            device = tf.identity(host)

        def h2d(host=host):
            with tf.device(f"GPU:{index}"):
                tf.reduce_sum(tf.identity(host)[:1]).numpy()

        def d2h(device=device):
            with tf.device("CPU:0"):
                tf.identity(device).numpy()

        to_device.append(size / _best_seconds(h2d, _repeats(size)) / 1e9)
        to_host.append(size / _best_seconds(d2h, _repeats(size)) / 1e9)
    return {"index": index, "host_to_device_gbps": to_device, "device_to_host_gbps": to_host}


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
