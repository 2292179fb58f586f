"""Byte sizes as people read them. (Parsing what people write is `lms.parse_size`: one parser
for the library and the suite.)"""


def positive_int(option: str, value) -> int:
    """A command-line option's value (text) as an integer >= 1; one SuiteError naming it if not."""
    from suite.errors import SuiteError

    try:
        number = int(value)
    except (TypeError, ValueError):
        number = 0
    if number < 1:
        raise SuiteError(f"--{option} {value!r}: an integer >= 1")
    return number


def format_bytes(size: int | float | None) -> str:
    """Binary units with three significant digits; None prints as an em dash."""
    if size is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
