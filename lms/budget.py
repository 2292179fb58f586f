"""The memory budget LMS plans for: device memory minus the framework's reserve, times a safety
ratio. Device memory is given (bytes or "16GiB") or read from the GPU through NVML."""

import math
import numbers

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


def parse_size(value, name: str = "size") -> int:
    """Bytes of 1073741824, "1GiB", "512 MiB" or "1.5GB" (binary and decimal units).

    The one parser of sizes for the library and the suite. A bare number is bytes and must be an
    integer: a float such as 1.5 could mean bytes or GiB, so it is refused with a hint to write
    the unit."""
    wrong = ParameterError(
        f"{name} must be a size like 16GiB, 512MiB or an integer number of bytes; "
        f"received {value!r}"
    )
    if isinstance(value, bool):
        raise wrong
    if isinstance(value, numbers.Integral):
        size = int(value)
    elif isinstance(value, numbers.Real):
        hint = f" (write the unit, e.g. '{value:g}GiB')" if math.isfinite(value) else ""
        raise ParameterError(f"{wrong}{hint}")
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(number) :] or "b"
        try:
            amount = float(number) * _UNITS[unit]
        except (KeyError, ValueError):
            raise wrong from None
        if not math.isfinite(amount):
            raise wrong
        size = int(amount)
    else:
        raise wrong
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


def format_size(size: int) -> str:
    """1 B, 812 KiB, 80.5 MiB, 1.25 GiB: about three significant digits in the largest unit, so
    that a budget of a few bytes does not print as 0.000 GiB."""
    for unit, factor in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= factor:
            value = size / factor
            return f"{value:.{0 if value >= 100 else 1 if value >= 10 else 2}f} {unit}"
    return f"{int(size)} B"


def budget_bytes(device_memory, reserve, safety_ratio: float) -> int:
    ratio_ok = isinstance(safety_ratio, numbers.Real) and not isinstance(safety_ratio, bool)
    if not ratio_ok or not 0 < safety_ratio <= 1:
        raise ParameterError(f"safety_ratio must be a number in (0, 1]; received {safety_ratio!r}")
    memory = parse_size(device_memory, "device_memory")
    reserved = parse_size(reserve, "reserve") if reserve else 0
    if reserved >= memory:
        raise ParameterError(
            f"reserve ({reserve}) leaves nothing of device_memory ({device_memory})"
        )
    return int((memory - reserved) * safety_ratio)
