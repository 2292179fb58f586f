"""The memory budget LMS plans for: device memory minus the framework's reserve, times a safety
ratio. Device memory is given (bytes or "16GiB") or read from the GPU through NVML."""

from lms.errors import ParameterError

_UNITS = {
    "b": 1,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
}


def to_bytes(value, name: str) -> int:
    """Bytes of 1073741824, "1GiB", "512 MiB" or "1.5GB"; a float alone means GiB."""
    if isinstance(value, bool):
        raise ParameterError(f"{name} must be a size; received {value!r}")
    if isinstance(value, int):
        size = value
    elif isinstance(value, float):
        size = int(value * 2**30)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(number) :] or "b"
        try:
            size = int(float(number) * _UNITS[unit])
        except (KeyError, ValueError):
            raise ParameterError(
                f"{name} must be a size like 16GiB, 512MiB or a number of bytes; received {value!r}"
            ) from None
    else:
        raise ParameterError(f"{name} must be a size; received {value!r}")
    if size <= 0:
        raise ParameterError(f"{name} must be positive; received {value!r}")
    return size


def gpu_memory_bytes(index: int = 0) -> int | None:
    """Total memory of GPU `index` from NVML (nvidia-ml-py), or None where it cannot be read."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            return int(pynvml.nvmlDeviceGetMemoryInfo(handle).total)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def budget_bytes(device_memory, reserve, safety_ratio: float) -> int:
    if not 0 < safety_ratio <= 1:
        raise ParameterError(f"safety_ratio must be in (0, 1]; received {safety_ratio!r}")
    memory = to_bytes(device_memory, "device_memory")
    reserved = to_bytes(reserve, "reserve") if reserve else 0
    if reserved >= memory:
        raise ParameterError(
            f"reserve ({reserve}) leaves nothing of device_memory ({device_memory})"
        )
    return int((memory - reserved) * safety_ratio)
