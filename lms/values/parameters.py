"""TFLMSv2's tuning parameters, checked on construction. `-1` means "auto-tune this one"."""

import re
from dataclasses import dataclass, field, replace

from lms.errors import ParameterError

AUTO = -1
_RANGE = re.compile(r"^\s*(\d*)\s*:\s*(\d*)\s*$")


def _check_int(name: str, value, minimum: int, allow_auto: bool = True) -> int:
    ok = isinstance(value, int) and not isinstance(value, bool)
    if not ok or not (value >= minimum or (allow_auto and value == AUTO)):
        auto = " or -1 (auto-tune)" if allow_auto else ""
        raise ParameterError(f"{name} must be an integer >= {minimum}{auto}; received {value!r}")
    return value


def parse_serialization(items) -> tuple[tuple[int, int | None], ...]:
    """Levels to serialize: ints and 'a:b' ranges (b exclusive, either side may be open)."""
    if isinstance(items, int | str):
        items = [items]
    ranges = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            ranges.append((item, item + 1))
            continue
        match = _RANGE.match(item) if isinstance(item, str) else None
        if not match:
            raise ParameterError(
                "serialization must be a list of levels (integers >= 0) or 'a:b' ranges; "
                f"received {item!r}"
            )
        start = int(match.group(1) or 0)
        stop = int(match.group(2)) if match.group(2) else None
        if stop is not None and stop <= start:
            raise ParameterError(f"serialization range {item!r} is empty")
        ranges.append((start, stop))
    return tuple(ranges)


@dataclass(frozen=True)
class Parameters:
    """What to swap and when (docs/lms.md, TFLMSv2).

    swapout_threshold: swap a tensor out when a consumer is more than this many levels after its
        producer; that consumer reads it back from a swap-in.
    swapin_ahead: trigger the swap-in this many ops before the consumer, walking back along the
        consumer's latest-running inputs.
    swapin_groupby: far consumers within this many levels of each other share one swap-in.
    sync_mode: 0 asynchronous; 1 synchronous swap-out (the producer's next ops wait for the copy);
        2 synchronous swap-in (the copy comes back right before the consumer); 3 both.
    serialization: levels (or 'a:b' ranges) whose ops run one after another.
    serialization_by_size: serialize every level whose ops' outputs together exceed this many GiB
        (0: off).
    ordering: 0 lets TensorFlow's executor order the ops (TFLMSv2's way; distances count
        levels); 1 runs them in a depth-first order chained by control dependencies (distances
        count ops; see lms/planning/ordering.py); -1 tries 1 first when tuning (then 0), and means 0
        when the three distances are all given (TFLMSv2's behaviour).
    """

    swapout_threshold: int = AUTO
    swapin_ahead: int = AUTO
    swapin_groupby: int = AUTO
    sync_mode: int = 0
    serialization: tuple = field(default=())
    serialization_by_size: float = 0.0
    ordering: int = AUTO

    def __post_init__(self):
        _check_int("swapout_threshold", self.swapout_threshold, 1)
        _check_int("swapin_ahead", self.swapin_ahead, 1)
        _check_int("swapin_groupby", self.swapin_groupby, 0)
        if self.sync_mode not in (0, 1, 2, 3):
            raise ParameterError(f"sync_mode must be 0, 1, 2 or 3; received {self.sync_mode!r}")
        if self.ordering not in (AUTO, 0, 1) or isinstance(self.ordering, bool):
            raise ParameterError(
                f"ordering must be 0 (free), 1 (depth-first) or -1 (auto); received "
                f"{self.ordering!r}"
            )
        object.__setattr__(self, "serialization", parse_serialization(self.serialization))
        size = self.serialization_by_size
        if not isinstance(size, int | float) or isinstance(size, bool) or size < 0:
            raise ParameterError(
                f"serialization_by_size must be a number of GiB >= 0; received {size!r}"
            )

    @property
    def ordered(self) -> bool:
        return self.ordering == 1

    @property
    def needs_tuning(self) -> bool:
        return AUTO in (self.swapout_threshold, self.swapin_ahead, self.swapin_groupby)

    def resolved(self, **values) -> "Parameters":
        return replace(self, **values)

    def as_dict(self) -> dict:
        return {
            "swapout_threshold": self.swapout_threshold,
            "swapin_ahead": self.swapin_ahead,
            "swapin_groupby": self.swapin_groupby,
            "sync_mode": self.sync_mode,
            "serialization": [f"{a}:{'' if b is None else b}" for a, b in self.serialization],
            "serialization_by_size": self.serialization_by_size,
            "ordering": self.ordering,
        }
