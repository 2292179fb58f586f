"""The checks of `LMS(...)`'s keyword arguments, without TensorFlow: a program that only
validates a configuration (a spec loader, a CLI) imports this and stays light."""

import os

from lms.budget import budget_bytes, parse_size
from lms.calibration import CALIBRATION_STEPS, MAX_CORRECTIONS
from lms.errors import ParameterError
from lms.link import Link
from lms.parameters import Parameters

MECHANISMS = ("auto", "host-store", "device-copy")
ALLOCATOR_MODELS = ("bfc", None)


def check_options(
    device_memory=None,
    *,
    swapout_threshold=-1,
    swapin_ahead=-1,
    swapin_groupby=-1,
    sync_mode=0,
    serialization=(),
    serialization_by_size=0.0,
    ordering=-1,
    reserve=None,
    safety_ratio=0.9,
    mechanism="auto",
    batch_size=None,
    plot=None,
    allocator="bfc",
    link=None,
    calibration_steps=CALIBRATION_STEPS,
    max_corrections=MAX_CORRECTIONS,
    calibration_cache=None,
) -> dict:
    """`LMS`'s arguments checked and normalized: `parameters` (an lms.Parameters),
    `device_bytes` (None: the GPU's, read when the LMS object is made), and the rest as given.
    Raises ParameterError naming the argument and what it allows."""
    parameters = Parameters(
        swapout_threshold,
        swapin_ahead,
        swapin_groupby,
        sync_mode,
        tuple(serialization) if not isinstance(serialization, str) else (serialization,),
        serialization_by_size,
        ordering,
    )
    if mechanism not in MECHANISMS:
        raise ParameterError(f"mechanism must be one of {MECHANISMS}; received {mechanism!r}")
    if allocator not in ALLOCATOR_MODELS:
        raise ParameterError(f"allocator must be one of {ALLOCATOR_MODELS}; received {allocator!r}")
    if batch_size is not None and (
        not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1
    ):
        raise ParameterError(f"batch_size must be an integer >= 1; received {batch_size!r}")
    if link is not None:
        link = Link.of(link)
        if mechanism == "device-copy":
            raise ParameterError(
                "link emulates a CPU-GPU link on the emulated device (mechanism 'host-store' "
                "or 'auto' without a GPU); a GPU's copies take its real link"
            )
    for name, value, minimum in (
        ("calibration_steps", calibration_steps, 0),
        ("max_corrections", max_corrections, 0),
    ):
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ParameterError(f"{name} must be an integer >= {minimum}; received {value!r}")
    if calibration_cache is not None and not isinstance(calibration_cache, str | os.PathLike):
        raise ParameterError(
            f"calibration_cache must be a file path or None; received {calibration_cache!r}"
        )
    device_bytes = None
    if device_memory is not None:
        device_bytes = parse_size(device_memory, "device_memory")
        budget_bytes(device_bytes, reserve, safety_ratio)  # checks reserve and safety_ratio
    else:
        budget_bytes(2**62, reserve, safety_ratio)  # the same checks before the GPU is read
    return {
        "parameters": parameters,
        "device_bytes": device_bytes,
        "reserve": reserve,
        "safety_ratio": safety_ratio,
        "mechanism": mechanism,
        "batch_size": batch_size,
        "plot": plot,
        "allocator": allocator,
        "link": link,
        "calibration_steps": calibration_steps,
        "max_corrections": max_corrections,
        "calibration_cache": calibration_cache,
    }
