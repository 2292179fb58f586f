"""Every option of `LMS(...)` with its default, checked once, without TensorFlow: a program that
only validates a configuration (a spec loader, a CLI) imports this and stays light."""

import os
from dataclasses import dataclass

from lms.errors import ParameterError
from lms.values.budget import budget_bytes, check_safety_ratio, parse_size, reserve_bytes
from lms.values.link import Link
from lms.values.parameters import AUTO, Parameters

# steps measured per plan before it is accepted, and corrections before giving up (the closed
# loop, lms/calibration.py)
CALIBRATION_STEPS = 3
MAX_CORRECTIONS = 3

MECHANISMS = ("auto", "host-store", "device-copy", "two-device")
ALLOCATOR_MODELS = ("bfc", None)


@dataclass(frozen=True)
class Options:
    """`LMS`'s options, checked on construction: a wrong value raises ParameterError naming the
    option and what it allows. `serialization` is kept as a tuple and `link` as an `lms.Link`.

    device_memory: bytes or "16GiB"; default: the GPU's memory (NVML). Required on the emulated
        device (a CPU), where it is the budget the measured peak must stay under.
    reserve: what the framework keeps for itself (bytes or "512MiB"); subtracted first.
    safety_ratio: fraction of what is left that the plan may fill. 0.9: the closed loop
        corrects what the simulation misses while it measures; the margin is for the steps
        after it accepted a plan, whose peak can vary with the executor's order (issue 26:
        benchmarks/lms_promises.py at 0.9, ten models x both CPU kernel sets x three processes,
        no measured step over the device memory; 0.8 before the loop).
    swapout_threshold, swapin_ahead, swapin_groupby, sync_mode, serialization,
        serialization_by_size, ordering: see `lms.Parameters`; -1 auto-tunes.
    mechanism: "auto" (a GPU: device copies; no GPU: the emulated device's host store),
        "host-store", "device-copy" (a GPU), or "two-device": the GPU's mechanism run for real
        on two logical CPU devices (compute on /CPU:1, the host on /CPU:0; call
        `lms.use_two_devices()` first), so that TensorFlow partitions, places and optimizes the
        step as on a GPU host; its plans are simulated only (lms/device/target.py).
    device: the device the step computes on, e.g. "GPU:1"; its memory pool is the default
        device_memory and its allocator the closed loop's meter. Default: the first GPU
        TensorFlow sees ("GPU:0"); with "two-device", "CPU:1".
    batch_size: substitutes an unknown leading dimension when sizing tensors.
    plot: path of a PNG of the simulated memory over the step, with and without LMS.
    allocator: "bfc" (default) checks the plan with the chunks TensorFlow's BFC allocator would
        give its allocations (lms/memory/allocator.py; up to twice the bytes asked each) and tunes
        again if that padding pushes it over the budget; None plans with the bytes asked only.
    link: on the emulated device, an `lms.Link` or {"bandwidth": "16GB/s", "latency": "10us"}
        the host store's copies are slowed to, so that link speed changes measured throughput
        (lms/values/link.py); a GPU's copies take its real link.
    calibration_steps: steps whose device peak is measured before a plan is trusted (the closed
        loop, lms/calibration.py): a measured peak over the budget re-plans for a budget lowered
        by the excess and rewrites the step. 0 turns the loop off (plans are only simulated).
    max_corrections: re-plans before the loop gives up (NothingFitsError naming the measured
        peaks; a plan over the budget but under the device memory is then kept with a warning).
    calibration_cache: path of a JSON file where corrected budgets are kept by the step's graph
        and device, so that the next run starts from the plan that held.
    split: "auto" (the default) splits the ops too large for the budget into pieces computed
        one after the other, only when no plan fits by swapping alone (lms/split/fit.py); a
        step that fits never pays for pieces. "off" never splits (swapping alone: its reach is
        bounded by the largest op); a dict {op type or op name: pieces} splits those ops always
        (to check equivalence).
    split_chains: True (the default) runs consecutive split ops piece by piece through the
        chain they make, so that what passes between them stays on the device and only what
        something else reads goes to the host (lms/split/chain.py); False splits each op alone
        (every split op reads its input from the host and writes its output back).
    host_memory: "auto" (the default) checks, before a step runs, that the host has the memory
        the plan needs (its simulated host peak; on the emulated device plus the device's
        simulated peak) against what is available then (lms/device/host_memory.py), and raises
        HostMemoryError if not, instead of the kernel's OOM killer ending the process later;
        bytes or "64GiB" check against that; None does not check.
    host_disk: a directory on a local disk (emulated device only) where the host store keeps,
        in memory-mapped files, the swapped tensors and split ops' host arrays beyond half the
        RAM host_memory leaves beside the device's buffers; the disk's free space bounds the
        rest (lms/device/host_memory.py DISK_RAM_SHARE). None (the default): RAM only.
    """

    device_memory: int | str | None = None  # None: the GPU's, read when the LMS object is made
    swapout_threshold: int = AUTO
    swapin_ahead: int = AUTO
    swapin_groupby: int = AUTO
    sync_mode: int = 0
    serialization: tuple = ()
    serialization_by_size: float = 0.0
    ordering: int = AUTO
    reserve: int | str | None = None
    safety_ratio: float = 0.9
    mechanism: str = "auto"
    device: str | None = None
    batch_size: int | None = None
    plot: str | None = None
    allocator: str | None = "bfc"
    link: Link | dict | None = None
    calibration_steps: int = CALIBRATION_STEPS
    max_corrections: int = MAX_CORRECTIONS
    calibration_cache: str | os.PathLike | None = None
    split: str | dict = "auto"
    split_chains: bool = True
    host_memory: int | str | None = "auto"
    host_disk: str | os.PathLike | None = None

    def __post_init__(self):
        serialization = self.serialization
        if isinstance(serialization, str):
            serialization = (serialization,)
        object.__setattr__(self, "serialization", tuple(serialization))
        self.parameters  # noqa: B018 (checks the tuning parameters)
        if self.mechanism not in MECHANISMS:
            raise ParameterError(
                f"mechanism must be one of {MECHANISMS}; received {self.mechanism!r}"
            )
        if self.device is not None and (
            not isinstance(self.device, str) or self.mechanism == "host-store"
        ):
            raise ParameterError(
                "device names the device a GPU step computes on, e.g. 'GPU:1' (not with "
                f"mechanism 'host-store'); received {self.device!r}"
            )
        if self.allocator not in ALLOCATOR_MODELS:
            raise ParameterError(
                f"allocator must be one of {ALLOCATOR_MODELS}; received {self.allocator!r}"
            )
        size = self.batch_size
        if size is not None and (not isinstance(size, int) or isinstance(size, bool) or size < 1):
            raise ParameterError(f"batch_size must be an integer >= 1; received {size!r}")
        if self.link is not None:
            object.__setattr__(self, "link", Link.of(self.link))
            if self.mechanism in ("device-copy", "two-device"):
                raise ParameterError(
                    "link emulates a CPU-GPU link on the emulated device (mechanism 'host-store' "
                    "or 'auto' without a GPU); a GPU's copies take its real link"
                )
        for name in ("calibration_steps", "max_corrections"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ParameterError(f"{name} must be an integer >= 0; received {value!r}")
        check_split(self.split)
        if not isinstance(self.split_chains, bool):
            raise ParameterError(
                f"split_chains must be True or False; received {self.split_chains!r}"
            )
        if self.host_memory not in ("auto", None):
            object.__setattr__(self, "host_memory", parse_size(self.host_memory, "host_memory"))
        disk = self.host_disk
        if disk is not None and not (isinstance(disk, str | os.PathLike) and os.path.isdir(disk)):
            raise ParameterError(
                f"host_disk must be an existing directory or None; received {disk!r}"
            )
        if disk is not None and not os.access(disk, os.W_OK):
            raise ParameterError(f"host_disk {str(disk)!r} is not writable")
        cache = self.calibration_cache
        if cache is not None and not isinstance(cache, str | os.PathLike):
            raise ParameterError(
                f"calibration_cache must be a file path or None; received {cache!r}"
            )
        if self.device_memory is not None:
            budget_bytes(self.device_bytes, self.reserve, self.safety_ratio)
        else:  # the device memory is read later (the GPU's): what can be checked now
            check_safety_ratio(self.safety_ratio)
            reserve_bytes(self.reserve)

    @property
    def parameters(self) -> Parameters:
        """The tuning parameters (TFLMSv2's)."""
        return Parameters(
            self.swapout_threshold,
            self.swapin_ahead,
            self.swapin_groupby,
            self.sync_mode,
            self.serialization,
            self.serialization_by_size,
            self.ordering,
        )

    @property
    def device_bytes(self) -> int | None:
        """`device_memory` in bytes; None: the GPU's, read when the LMS object is made."""
        if self.device_memory is None:
            return None
        return parse_size(self.device_memory, "device_memory")


def check_split(split) -> None:
    """`split` is "auto", "off" or {op type or name: pieces >= 2}."""
    if split in ("auto", "off"):
        return
    if isinstance(split, dict) and split:
        for key, pieces in split.items():
            whole = isinstance(pieces, int) and not isinstance(pieces, bool)
            if not isinstance(key, str) or not whole or pieces < 2:
                raise ParameterError(
                    f"split[{key!r}] must be an integer of pieces >= 2; received {pieces!r}"
                )
        return
    raise ParameterError(
        f'split must be "auto", "off" or {{op type or op name: pieces}}; received {split!r}'
    )


def check_options(device_memory=None, **options) -> Options:
    """`LMS`'s arguments checked: the `lms.Options` they make. Raises ParameterError naming the
    argument and what it allows (TypeError for a name LMS does not take)."""
    return Options(device_memory, **options)
