"""The suite's expected user errors: the CLI prints these as one line, never as a traceback."""


class SuiteError(Exception):
    """A user error the suite reports plainly (bad input, missing file, unknown name): a task
    ends with `line()` and `exit_code`."""

    exit_code = 2

    def line(self) -> str:
        return f"error: {self}"


class SpecError(SuiteError):
    """A spec file, or an override of it, is invalid. The message names file, field and value."""

    def __init__(self, source: str, field: str, value: object, allowed: str):
        self.source, self.field, self.value, self.allowed = source, field, value, allowed
        super().__init__(f"{source}: field '{field}' = {value!r} is invalid; allowed: {allowed}")


class RecordError(SuiteError):
    """A results file holds a record the suite cannot read (wrong schema, corrupt line)."""
