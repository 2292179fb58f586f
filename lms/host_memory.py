"""Whether the host has the memory a plan needs, checked before a step runs: swapped tensors and
split ops' host arrays live in host memory (on the emulated device, so do the device's buffers),
and a step that needs more than the host has is killed by the kernel's OOM killer with no word
of why (ResNet50 1920² b1 split in 400 MiB: killed at 13.4 GB; issue 31).

What is available: the kernel's MemAvailable (/proc/meminfo), or less where a cgroup limits the
process (a container's memory limit), read when the plan is made; the `host_memory` option
replaces it."""

from pathlib import Path

from lms.budget import format_size
from lms.errors import HostMemoryError

MEMINFO = Path("/proc/meminfo")
# what a step's process grows by beyond the simulated host and device peaks: piece copies on
# their way, the executor running two ops at a time, freed arrays malloc keeps. Measured
# (benchmarks/lms_host_need.py, 400 MiB emulated device, split steps): 1.10-1.14x for ResNet50
# 1024² b1 without the closed loop, 1.21-1.23x for ResNet50 1024² and GoogLeNet 2048² with it
# (its corrections re-plan in the same process)
OVERHEAD = 1.3
CGROUP_LIMITS = (  # (limit, usage): cgroup v2, then v1
    (Path("/sys/fs/cgroup/memory.max"), Path("/sys/fs/cgroup/memory.current")),
    (
        Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
        Path("/sys/fs/cgroup/memory/memory.usage_in_bytes"),
    ),
)


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def available_bytes() -> int | None:
    """Host memory a process can still take: MemAvailable, capped by its cgroup's limit less
    its usage; None where neither can be read (not Linux)."""
    found = []
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    for limit_path, usage_path in CGROUP_LIMITS:
        limit, usage = _read_int(limit_path), _read_int(usage_path)
        if limit is not None and usage is not None and limit < 2**60:
            found.append(max(limit - usage, 0))
            break
    return min(found) if found else None


def host_need(host_peak: int, device_peak: int, emulated: bool) -> int:
    """What the step adds to the host's memory at its peak: OVERHEAD times the host's simulated
    peak and, on the emulated device, the device's simulated peak (its buffers are host memory;
    not its budget, which tests and equivalence checks set to a TiB)."""
    return int(OVERHEAD * (host_peak + (device_peak if emulated else 0)))


def check_host_memory(host_peak: int, device_peak: int, emulated: bool, limit) -> None:
    """Raise HostMemoryError when the plan needs more host memory than `limit` (bytes, "auto":
    what is available now, None: no check)."""
    if limit is None:
        return
    available = available_bytes() if limit == "auto" else int(limit)
    if available is None:
        return
    need = host_need(host_peak, device_peak, emulated)
    if need <= available:
        return
    device = f" and the emulated device's {format_size(device_peak)}" if emulated else ""
    source = "available now (MemAvailable, or the cgroup's limit)" if limit == "auto" else "given"
    raise HostMemoryError(
        f"host memory: the plan holds {format_size(host_peak)} on the host at its peak "
        f"(swapped tensors and split ops' host arrays){device}, with the process's overhead "
        f"({OVERHEAD:g}x, lms.host_memory.OVERHEAD) {format_size(need)}, over the "
        f"{format_size(available)} of host memory {source} (LMS option host_memory)",
        need,
        available,
    )
