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
# An integer without a unit is bytes; below this it is more likely a size whose unit was left out.
MIN_BARE_BYTES = 2**20


def _no_unit(name: str, value, number: float, why: str = "") -> ParameterError:
    """The error of a size given without its unit, with a hint to write one."""
    error = ParameterError(f"{name} {value!r} has no unit{why}: write e.g. {_unit_hint(number)}")
    error.hint = _unit_hint(number)
    return error


def _unit_hint(number: float) -> str:
    """Two ways to write `number` with a unit, for a size given without one."""
    if number >= MIN_BARE_BYTES and number == int(number):
        return f"{int(number)}B or {number / 2**20:.12g}MiB"
    return f"{number:.12g}GiB or {number * 1024:.12g}MiB"


def parse_size(value, name: str = "size") -> int:
    """Bytes of "1GiB", "512 MiB", "1.5GB" (binary and decimal units) or an integer of bytes.

    The one parser of sizes for the library and the suite. A size without its unit is refused
    with a hint to write it: "1.5" or 1.5 could mean bytes or GiB (read as bytes, `--device-memory
    1.5` planned for 1 byte), and an integer below 1 MiB is rarely meant as bytes."""
    wrong = ParameterError(
        f"{name} must be a size like 16GiB, 512MiB or an integer number of bytes; "
        f"received {value!r}"
    )
    if isinstance(value, bool):
        raise wrong
    if isinstance(value, numbers.Integral):
        size = int(value)
        if 0 < size < MIN_BARE_BYTES:
            raise _no_unit(name, value, size, " and is below 1 MiB as bytes")
    elif isinstance(value, numbers.Real):
        if not math.isfinite(value):
            raise wrong
        raise _no_unit(name, value, value)
    elif isinstance(value, str):
        text = value.strip().lower().replace(" ", "")
        number = text.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = text[len(number) :]
        try:
            amount = float(number) * _UNITS[unit or "b"]
        except (KeyError, ValueError):
            raise wrong from None
        if not math.isfinite(amount):
            raise wrong
        if not unit and amount > 0:
            raise _no_unit(name, value, float(number))
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


def check_safety_ratio(safety_ratio) -> None:
    ratio_ok = isinstance(safety_ratio, numbers.Real) and not isinstance(safety_ratio, bool)
    if not ratio_ok or not 0 < safety_ratio <= 1:
        raise ParameterError(f"safety_ratio must be a number in (0, 1]; received {safety_ratio!r}")


def reserve_bytes(reserve) -> int:
    """What the framework keeps for itself (None or 0: nothing)."""
    return parse_size(reserve, "reserve") if reserve else 0


def budget_bytes(device_bytes: int, reserve, safety_ratio: float) -> int:
    """What a plan may fill of `device_bytes` (parsed: `parse_size`)."""
    check_safety_ratio(safety_ratio)
    reserved = reserve_bytes(reserve)
    if reserved >= device_bytes:
        raise ParameterError(
            f"reserve ({reserve}) leaves nothing of device_memory ({device_bytes})"
        )
    return int((device_bytes - reserved) * safety_ratio)
