"""Errors a user of `lms` can meet and act on."""


class LMSError(Exception):
    """Base class of the library's expected errors."""


class ParameterError(LMSError, ValueError):
    """An LMS parameter has a value outside what it allows; the message says what is allowed.

    `hint` (a size given without its unit): how to write it, e.g. "1.5GiB or 1536MiB"."""

    hint = None


class NothingFitsError(LMSError):
    """No parameter set brings the simulated peak under the memory budget.

    What it carries, for a report of the shortfall or a plan run to be measured all the same:
    - `closest`: the `lms.internal.Tuned` whose simulated peak came lowest, or None;
    - `analysis`: the `lms.internal.Analysis` `closest` was planned on (once splitting edited
      the graph, that of the graph as split), or None;
    - `splits`: the ops split before splitting stopped (`lms.split.rewrite.Split`), in order.
    """

    def __init__(self, message: str, closest=None, analysis=None, splits=()):
        super().__init__(message)
        self.closest, self.analysis, self.splits = closest, analysis, list(splits)

    def stopped(self, why: str, analysis, splits) -> "NothingFitsError":
        """This error, with why splitting stopped added, and the graph it stopped at."""
        return NothingFitsError(f"{self}; {why}", self.closest, analysis, splits)


class HostMemoryError(LMSError, MemoryError):
    """The plan needs more host memory than the host has (lms/device/host_memory.py): the step
    would be
    killed by the kernel's OOM killer. `need` and `available` are bytes."""

    def __init__(self, message: str, need: int = 0, available: int = 0):
        super().__init__(message)
        self.need, self.available = need, available
