"""The closed loop: a plan is checked by measuring the step it made, and corrected until it holds.

The simulator cannot see everything that sets a step's real peak (TensorFlow's executor order
where it is free, the CPU's or GPU's kernels, the allocator's history, what the program holds
outside the step), so a plan that fits in simulation can overrun when it runs. `LMSFunction`
therefore measures the device's peak over the first steps of every plan (TensorFlow's allocator
statistics: the emulated device's BFC allocator on the CPU, the GPU's own) and, when the peak
exceeds the budget, plans again for a budget lowered by the measured excess and rewrites the
step; an out-of-memory error on such a step does the same. After a few corrections it gives up
with one `NothingFitsError` naming the measured peaks.

This module holds the loop's bookkeeping (attempts, the next budget) and the meter; it does not
touch graphs. The first run of a rewritten step is not measured: it holds the function's one-time
allocations (a small CNN measured 88 MiB on its first run, 50.5 MiB on every later one).
"""

import dataclasses
import hashlib
import json
import logging
import os
import tempfile
from dataclasses import dataclass, field

from lms.errors import NothingFitsError
from lms.values.budget import format_size
from lms.values.options import CALIBRATION_STEPS, MAX_CORRECTIONS

log = logging.getLogger("lms")

# runs of a newly rewritten step that are not measured (one-time allocations)
UNMEASURED_RUNS = 1


@dataclass
class Attempt:
    """One plan and what it did when it ran."""

    budget_bytes: int  # what the tuner planned for
    simulated_peak_bytes: int  # the plan's simulated peak (allocator model included)
    measured_peak_bytes: int | None = None  # the largest of the measured steps' peaks
    steps: int = 0  # steps measured
    outcome: str = "measuring"  # measuring | fits | over | out_of_memory | kept | skipped
    note: str | None = None  # why the simulation doubted it (nothing fit: the closest plan)

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


class PeakMeter:
    """The device's peak bytes since the last reset, from TensorFlow's allocator statistics.

    device: "CPU:0" on the emulated device (its statistics need TF_CPU_ALLOCATOR_USE_BFC=true
    before TensorFlow starts), "GPU:0" on a GPU. `available` is False where TensorFlow keeps no
    statistics for the device: the loop is then open (the plan is only simulated)."""

    def __init__(self, device: str):
        import tensorflow as tf

        self.device, self._tf = device, tf
        try:
            tf.config.experimental.get_memory_info(device)
            self.available = True
        except (ValueError, RuntimeError):
            self.available = False

    def reset(self) -> None:
        if self.available:
            self._tf.config.experimental.reset_memory_stats(self.device)

    def peak(self) -> int | None:
        if not self.available:
            return None
        return int(self._tf.config.experimental.get_memory_info(self.device)["peak"])


@dataclass
class Calibration:
    """The loop's state for one input signature: every attempt, and whether a plan holds.

    limit_bytes: what the measured peak must stay under (the plan's budget: the safety ratio is
    then the margin left for the measured peak's spread between steps and processes, not for the
    simulator's error, which the loop corrects).
    device_limit_bytes: the device memory left after the reserve. Once the corrections are used
    up, a plan over `limit_bytes` but under this is kept with a warning; over it, NothingFitsError.
    """

    limit_bytes: int
    device_limit_bytes: int
    steps: int = CALIBRATION_STEPS
    max_corrections: int = MAX_CORRECTIONS
    attempts: list = field(default_factory=list)
    accepted: bool = False
    _unmeasured: int = 0

    @property
    def corrections(self) -> int:
        return max(0, len(self.attempts) - 1)

    @property
    def current(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    def begin(self, budget_bytes: int, simulated_peak_bytes: int, note=None) -> None:
        """A new plan was made for `budget_bytes` and is about to run."""
        self.attempts.append(Attempt(int(budget_bytes), int(simulated_peak_bytes), note=note))
        self.accepted, self._unmeasured = False, UNMEASURED_RUNS

    def skip_measure(self) -> bool:
        """Whether the coming step is one of a new plan's unmeasured first runs."""
        if self._unmeasured > 0:
            self._unmeasured -= 1
            return True
        return False

    def observe(self, peak_bytes: int) -> bool:
        """Record one measured step; True when the plan overran (a correction is due)."""
        attempt = self.current
        attempt.steps += 1
        attempt.measured_peak_bytes = max(attempt.measured_peak_bytes or 0, int(peak_bytes))
        log.debug("LMS: a step's measured peak: %s", format_size(peak_bytes))
        if peak_bytes > self.limit_bytes:
            attempt.outcome = "over"
            return True
        if not self.accepted and attempt.steps >= self.steps:
            attempt.outcome, self.accepted = "fits", True
            log.info(
                "LMS: the plan's measured peak %s over %d steps fits the budget %s (simulated %s)",
                format_size(attempt.measured_peak_bytes),
                attempt.steps,
                format_size(self.limit_bytes),
                format_size(attempt.simulated_peak_bytes),
            )
        return False

    def out_of_memory(self, peak_bytes: int | None) -> None:
        """The step failed for lack of device memory (GPU: ResourceExhaustedError)."""
        attempt = self.current
        attempt.steps += 1
        attempt.outcome = "out_of_memory"
        # at least the device: what the step asked for when it failed is not known
        attempt.measured_peak_bytes = max(peak_bytes or 0, self.device_limit_bytes + 1)

    def skip(self, why: str) -> None:
        """The current plan is not run (`why`): it cannot fit, and the loop goes on as if it had
        failed (lms/function.py: a plan simulated far over the device memory)."""
        self.current.outcome, self.current.note = "skipped", why

    def _failed(self, attempt) -> bool:
        """Whether `attempt` ran out of the device memory, measured over it, or was skipped."""
        if attempt.outcome in ("out_of_memory", "skipped"):
            return True
        return (attempt.measured_peak_bytes or 0) > self.device_limit_bytes

    def next_budget(self) -> int | None:
        """The budget to plan for after the current attempt overran: the plan's own simulated
        peak scaled by budget / measured peak. None: no correction is left (see `keep_or_fail`)."""
        attempt = self.current
        if self.corrections >= self.max_corrections:
            return None
        # below the plan's own simulated peak, so that the tuner must find another plan, by the
        # measured excess in proportion: the simulation's error grows with what the step holds
        # (Eigen's convolution temporaries: a 2.0x underestimate, where subtracting the excess
        # in bytes asked for a budget of 4 MiB and the loop gave up), and for memory held
        # outside the step it lowers a little less than the excess (one more correction)
        below = min(attempt.budget_bytes, attempt.simulated_peak_bytes)
        target = below * self.limit_bytes // attempt.measured_peak_bytes
        if target <= 0:
            return None
        log.warning(
            "LMS: the plan's measured peak %s is over the budget %s (simulated %s): planning "
            "again for %s (correction %d of at most %d)",
            format_size(attempt.measured_peak_bytes),
            format_size(self.limit_bytes),
            format_size(attempt.simulated_peak_bytes),
            format_size(target),
            self.corrections + 1,
            self.max_corrections,
        )
        return int(target)

    def best_kept_earlier(self) -> "Attempt | None":
        """An earlier attempt whose measured peak fit the device memory while the current one
        does not: the loop plans it again (the same budget gives the same plan) rather than give
        up. Corrections can make a plan worse (a split plan's pieces planned for less room), so
        the best measured plan is not always the last."""
        if not self._failed(self.current):
            return None
        fitting = [
            a
            for a in self.attempts[:-1]
            if a.outcome == "over" and (a.measured_peak_bytes or 0) <= self.device_limit_bytes
        ]
        return min(fitting, key=lambda a: a.measured_peak_bytes, default=None)

    def keep_or_fail(self, why: str) -> None:
        """No better plan can be had (`why`): keep the current one when its measured peak fits
        the device memory (with a warning: it is over the budget's margin), else raise
        NothingFitsError naming every attempt's measured peak."""
        attempt = self.current
        if not self._failed(attempt):
            log.warning(
                "LMS: %s the plan's measured peak %s is over the budget %s but fits the device "
                "memory %s: keeping it",
                why + ",",
                format_size(attempt.measured_peak_bytes),
                format_size(self.limit_bytes),
                format_size(self.device_limit_bytes),
            )
            attempt.outcome, self.accepted = "kept", True
            return None
        notes = [a.note for a in self.attempts if a.note]
        raise NothingFitsError(
            f"no LMS plan kept the measured peak under the device memory of "
            f"{format_size(self.device_limit_bytes)} ({why}): {self.describe()}"
            + (f". In simulation: {notes[0]}" if notes else "")
        )

    def describe(self) -> str:
        """Every attempt in one line: planned for, simulated, measured."""
        parts = []
        for a in self.attempts:
            measured = format_size(a.measured_peak_bytes) if a.measured_peak_bytes else "nothing"
            parts.append(
                f"planned for {format_size(a.budget_bytes)}, simulated "
                f"{format_size(a.simulated_peak_bytes)}, measured {measured} ({a.outcome})"
            )
        return "; ".join(parts)

    def as_dict(self) -> dict:
        return {
            "limit_bytes": self.limit_bytes,
            "device_limit_bytes": self.device_limit_bytes,
            "accepted": self.accepted,
            "corrections": self.corrections,
            "attempts": [a.as_dict() for a in self.attempts],
        }


def fingerprint(graph, device_key: str) -> str:
    """A key for the calibration cache: the step's plain graph (op names, types, inputs and the
    shapes of their outputs) and the device (kind, memory, kernels, TensorFlow version)."""
    digest = hashlib.sha256(device_key.encode())
    for op in graph.get_operations():
        digest.update(op.name.encode())
        digest.update(op.type.encode())
        for tensor in op.inputs:
            digest.update(tensor.name.encode())
        for tensor in op.outputs:
            digest.update(str(tensor.shape).encode())
            digest.update(tensor.dtype.name.encode())
    return digest.hexdigest()[:32]


class CalibrationCache:
    """A JSON file of corrected budgets by step fingerprint, so that the next run of the same
    step on the same device starts from the plan that held (TFLMSv2 told its users to put tuned
    values on the constructor for the same reason). Written atomically; an unreadable file is
    ignored with a warning, never fatal."""

    VERSION = 1

    def __init__(self, path):
        self.path = os.fspath(path)

    def _load(self) -> dict:
        try:
            with open(self.path) as handle:
                data = json.load(handle)
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as error:
            log.warning("LMS: ignoring the calibration cache %s: %s", self.path, error)
            return {}
        if not isinstance(data, dict) or data.get("version") != self.VERSION:
            log.warning(
                "LMS: ignoring the calibration cache %s: not a version-%d cache",
                self.path,
                self.VERSION,
            )
            return {}
        return data.get("steps", {}) if isinstance(data.get("steps"), dict) else {}

    def entry(self, key: str) -> dict | None:
        """What the cache holds for `key`: the budget that held and the attempts that led
        there (as `Calibration.as_dict` writes them), or None."""
        entry = self._load().get(key)
        if isinstance(entry, dict) and isinstance(entry.get("budget_bytes"), int):
            return entry
        return None

    def budget(self, key: str) -> int | None:
        """The budget that held for `key` last time, or None."""
        entry = self.entry(key)
        return None if entry is None else entry["budget_bytes"]

    def store(
        self,
        key: str,
        calibration: Calibration,
        parameters: dict,
        pruned_for: int | None = None,
        streamed_lists: int = 0,
    ) -> None:
        """Keep the accepted plan's budget and parameters (`lms.Parameters.as_dict`), the
        budget its plan dropped the swaps it did not need for (lms/tuning/prune.py; None: it
        did not), and how many loop lists its step streamed (lms/device/list_streams.py;
        written only when some were)."""
        steps = self._load()
        streamed = {"streamed_lists": streamed_lists} if streamed_lists else {}
        steps[key] = {
            "budget_bytes": calibration.current.budget_bytes,
            "parameters": parameters,
            "pruned_for_bytes": pruned_for,
            **streamed,
            **calibration.as_dict(),
            "from_cache": True,
        }
        directory = os.path.dirname(os.path.abspath(self.path))
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".lms-calibration-")
        try:
            with os.fdopen(handle, "w") as out:
                json.dump({"version": self.VERSION, "steps": steps}, out, indent=1)
            os.replace(temporary, self.path)
        except BaseException:
            os.unlink(temporary)
            raise
