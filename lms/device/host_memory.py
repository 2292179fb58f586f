"""Whether the host has the memory a plan needs, checked before a step runs: swapped tensors and
split ops' host arrays live in host memory (on the emulated device, so do the device's buffers),
and a step that needs more than the host has is killed by the kernel's OOM killer with no word
of why (ResNet50 1920² b1 split in 400 MiB: killed at 13.4 GB; issue 31).

What is available: the kernel's MemAvailable (/proc/meminfo), or less where a cgroup limits the
process (a container's memory limit), read when the plan is made; the `host_memory` option
replaces it. With a disk directory (the `host_disk` option) the host store keeps what does not
fit that memory in memory-mapped files there (lms/device/host_arrays.py): the check then asks the
disk's free space for the rest, and gives the store the RAM it may fill."""

import os
import shutil
from pathlib import Path

from lms.errors import HostMemoryError
from lms.values.budget import format_size

MEMINFO = Path("/proc/meminfo")
# TensorFlow's pinned host allocator on a GPU host: a BFC capped by this variable, 64 GiB by
# default (gpu_process_state.cc); swapped tensors and split ops' pieces live there
PINNED_LIMIT_VARIABLE = "TF_GPU_HOST_MEM_LIMIT_IN_MB"
PINNED_DEFAULT_MB = 64 * 1024
# what a step's process grows by beyond the simulated host and device peaks: piece copies on
# their way, the executor running two ops at a time, freed arrays malloc keeps. Measured
# (benchmarks/lms_host_need.py, 400 MiB emulated device, split steps): 1.10-1.14x for ResNet50
# 1024² b1 without the closed loop, 1.06-1.23x for ResNet50 1024², GoogLeNet 2048² and
# MobileNetV2 2048² with it (its corrections re-plan in the same process)
OVERHEAD = 1.3
# with a disk, the share of the RAM the memory leaves beside the device that the host store's
# arrays may fill: the mapped files' page cache counts in a cgroup's memory too, and the process
# grew past OVERHEAD there (ResNet50 1024² b1 split in 400 MiB, a 3.5 GiB cgroup: the store given
# all of it, 1.5 GiB, and the process killed at the limit; benchmarks/lms_host_disk.py)
DISK_RAM_SHARE = 0.5
CGROUPS = Path("/sys/fs/cgroup")
V1 = (CGROUPS / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes")
V2 = (CGROUPS, "memory.max", "memory.current")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _own_cgroups(proc_cgroup: Path) -> list[tuple[Path, str, str, str]]:
    """The process's memory cgroups: (controller mount, path in it, limit file, usage file)."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return []
    found = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            found.append((V1[0], path.lstrip("/"), *V1[1:]))
        elif not controllers:  # the unified (v2) hierarchy
            found.append((V2[0], path.lstrip("/"), *V2[1:]))
    return found


def cgroup_room(proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The least room (limit less usage) over the process's memory cgroup and its ancestors
    (a container's limit, or one set higher up); None where no limit is set or readable. A
    cgroup namespace mounts the process's own cgroup as the root: then that is where to read."""
    rooms = []
    for base, path, limit_name, usage_name in _own_cgroups(proc_cgroup):
        directory = base / path
        if not directory.is_dir():
            directory = base  # namespaced: the mount is the process's cgroup
        while True:
            limit = _read_int(directory / limit_name)
            usage = _read_int(directory / usage_name)
            if limit is not None and usage is not None and limit < 2**60:
                rooms.append(max(limit - usage, 0))
            if directory == base or base not in directory.parents:
                break
            directory = directory.parent
    return min(rooms) if rooms else None


def available_bytes() -> int | None:
    """Host memory a process can still take: MemAvailable, capped by the room its memory
    cgroups leave; None where neither can be read (not Linux)."""
    found = []
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append(int(line.split()[1]) * 1024)
    except OSError:
        pass
    room = cgroup_room()
    if room is not None:
        found.append(room)
    return min(found) if found else None


def pinned_limit_bytes() -> int:
    """The pinned host allocator's cap: TF_GPU_HOST_MEM_LIMIT_IN_MB, 64 GiB by default."""
    text = os.environ.get(PINNED_LIMIT_VARIABLE, "").strip()
    megabytes = int(text) if text.isdigit() else PINNED_DEFAULT_MB
    return megabytes * 2**20


def pinned_hint() -> str:
    """How the pinned host allocator's cap is set, and what it is now."""
    return (
        f"TensorFlow's pinned host allocator is capped at {pinned_limit_bytes() // 2**20} MB; "
        f"raise it with {PINNED_LIMIT_VARIABLE}=<MB> before TensorFlow starts"
    )


def _available(limit) -> int | None:
    """The host memory `limit` stands for: its bytes, or what is available now ("auto", None)."""
    return available_bytes() if limit in ("auto", None) else int(limit)


def host_need(host_peak: int, device_peak: int, emulated: bool) -> int:
    """What the step adds to the host's memory at its peak: OVERHEAD times the host's simulated
    peak and, on the emulated device, the device's simulated peak (its buffers are host memory;
    not its budget, which tests and equivalence checks set to a TiB)."""
    return int(OVERHEAD * (host_peak + (device_peak if emulated else 0)))


def check_host_memory(
    host_peak: int,
    device_peak: int,
    emulated: bool,
    limit,
    pinned: int | None = None,
    disk=None,
) -> int | None:
    """Raise HostMemoryError when the plan needs more host memory than `limit` (bytes, "auto":
    what is available now, None: no check). `pinned`: the cap of TensorFlow's pinned host
    allocator, where a GPU host's copies live (lms.device.target.pinned_limit_bytes); the host's
    memory is then the smaller of the two, and the error says how to raise the cap.

    With `disk` (the host store's directory, emulated device only) the host arrays beyond the
    memory go to the disk: returns the bytes of them the store may keep in RAM (`limit` None
    reads what is available, as "auto"), and raises when the disk's free space is short too."""
    if disk is not None:
        return _disk_check(host_peak, device_peak, emulated, limit, disk)
    if limit is None:
        return None
    available = _available(limit)
    capped = pinned is not None and (available is None or pinned < available)
    if capped:
        available = pinned
    if available is None:
        return None
    need = host_need(host_peak, device_peak, emulated)
    if need <= available:
        return None
    device = f" and the emulated device's {format_size(device_peak)}" if emulated else ""
    if capped:
        source = f"the pinned allocator allows ({pinned_hint()})"
    elif limit == "auto":
        source = "available now (MemAvailable, or the cgroup's limit)"
    else:
        source = "given"
    raise HostMemoryError(
        f"host memory: the plan holds {format_size(host_peak)} on the host at its peak "
        f"(swapped tensors and split ops' host arrays){device}, with the process's overhead "
        f"({OVERHEAD:g}x, lms.device.host_memory.OVERHEAD) {format_size(need)}, over the "
        f"{format_size(available)} of host memory {source} (LMS option host_memory)",
        need,
        available,
    )


def _disk_check(host_peak: int, device_peak: int, emulated: bool, limit, disk) -> int | None:
    """`check_host_memory` with a disk: the store's RAM is DISK_RAM_SHARE of what the memory
    leaves beside the emulated device's buffers (both with the process's OVERHEAD); the rest of
    the host peak must fit the disk's free space."""
    available = _available(limit)
    if available is None:
        return None  # nothing to bound the RAM by: the store keeps its arrays in memory
    device = device_peak if emulated else 0
    if OVERHEAD * device > available:  # the device's buffers cannot go to the disk
        raise HostMemoryError(
            f"host memory: the emulated device's {format_size(device)}, with the process's "
            f"overhead ({OVERHEAD:g}x), are over the {format_size(available)} of host memory "
            "(LMS option host_memory); a disk (host_disk) holds only the host's arrays",
            int(OVERHEAD * device),
            available,
        )
    ram = int(DISK_RAM_SHARE * (available / OVERHEAD - device))
    on_disk = max(host_peak - ram, 0)
    free = shutil.disk_usage(disk).free
    if on_disk > free:
        raise HostMemoryError(
            f"host memory: the plan holds {format_size(host_peak)} on the host at its peak; "
            f"{format_size(ram)} fit the {format_size(available)} of host memory beside the "
            f"emulated device's {format_size(device)} (with the process's overhead "
            f"{OVERHEAD:g}x), and the other {format_size(on_disk)} are over the "
            f"{format_size(free)} free on the disk of {disk} (LMS options host_memory, host_disk)",
            on_disk,
            free,
        )
    return ram
