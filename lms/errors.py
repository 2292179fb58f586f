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
