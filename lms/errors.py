"""Errors a user of `lms` can meet and act on."""


class LMSError(Exception):
    """Base class of the library's expected errors."""


class ParameterError(LMSError, ValueError):
    """An LMS parameter has a value outside what it allows; the message says what is allowed.

    `hint` (a size given without its unit): how to write it, e.g. "1.5GiB or 1536MiB"."""

    hint = None


class NothingFitsError(LMSError):
    """No parameter set brings the simulated peak under the memory budget.

    `closest` (an lms.Tuned, or None) holds the parameter set whose simulated peak came lowest.
    """

    closest = None


class HostMemoryError(LMSError, MemoryError):
    """The plan needs more host memory than the host has (lms/device/host_memory.py): the step
    would be
    killed by the kernel's OOM killer. `need` and `available` are bytes."""

    def __init__(self, message: str, need: int = 0, available: int = 0):
        super().__init__(message)
        self.need, self.available = need, available
