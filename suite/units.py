"""Byte sizes as people write them ("16GiB", "512 MiB", "1.5GB", 1073741824) and back."""

import re

_UNITS = {
    "": 1,
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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(value: int | str) -> int:
    """Bytes in `value`; raises ValueError naming the accepted forms."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value <= 0:
            raise ValueError("a size must be positive")
        return value
    match = _SIZE.match(value) if isinstance(value, str) else None
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError("a size like 16GiB, 512MiB, 1.5GB or a number of bytes")
    size = int(float(match.group(1)) * _UNITS[match.group(2).lower()])
    if size <= 0:
        raise ValueError("a size must be positive")
    return size


def format_bytes(size: int | float | None) -> str:
    """Binary units with three significant digits; None prints as a dash."""
    if size is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
