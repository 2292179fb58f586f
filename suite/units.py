"""Byte sizes as people write and read them. Parsing is `lms.parse_size` (one parser for the
library and the suite, which refuses a size without its unit); `parse_size` here turns its error
into the suite's, naming the option or field."""


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


def parse_size(name: str, value) -> int:
    """`value` (e.g. "16GiB"; an integer is bytes) as bytes; one SuiteError naming `name` (an
    option such as --device-memory, or a file's field) with lms's hint if it has no unit."""
    import lms
    from suite.errors import SuiteError

    try:
        return lms.parse_size(value, name)
    except lms.ParameterError as error:
        if error.hint:  # a size without its unit: lms's message says how to write it
            raise SuiteError(str(error)) from None
        raise SuiteError(
            f"{name} {value!r}: a size like 16GiB, 512MiB or an integer number of bytes"
        ) from None


def size_option(option: str, value: str | None) -> int | None:
    """A command-line size (`inv plan --device-memory 16GiB`) as bytes, parsed where the task
    reads it and handed on as bytes; None when not given."""
    return None if value is None else parse_size(option, value)


def format_bytes(size: int | float | None) -> str:
    """Binary units with three significant digits; None prints as an em dash."""
    if size is None:
        return "—"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(size) < 1024 or unit == "GiB":
            break
        size /= 1024
    return f"{size:.0f} {unit}" if unit == "B" else f"{size:.3g} {unit}"
