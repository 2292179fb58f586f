"""The five checks of `inv gpucheck` as data (suite/running/gpucheck.py runs them): which parts
each runs in a process of its own, what they expect (STYLE 9: a failure line shows the expected
and measured values), and why a GPU-only part cannot run without a GPU.

Apart from the code that runs the checks, so that the judges (gpucheck_judges.py), the check
processes (gpucheck_worker.py) and the runner read one definition. Needs no TensorFlow.
"""

from dataclasses import dataclass, field

MODES = ("gpu", "two-device")
NO_GPU = (
    "no GPU here: the two logical CPU devices share the CPU's allocator, so nothing measures the "
    "compute device's own peak"
)
# why a GPU-only part of a check process cannot run on the two logical CPU devices
NO_COPY_EVENTS = "the two CPU devices' copies are memcpys, which the profiler records no events of"
NO_GPU_PASSES = "they act on GPU devices only; replayed above on a virtual GPU"

# what a check expects, as data (STYLE 9): a failure line shows the expected and measured values
EXPECT = {
    "peak_model_error": 0.10,  # c: |measured / simulated - 1| of the LMS step's peak
    "drop_share": 0.5,  # c: the measured drop (plain - LMS) is at least this share of the simulated
    "update_rtol": 1e-4,  # e: each variable's update to this share of its own size (fp32) ...
    "update_floor": 1e-6,  # ... or of the whole step's update (rounding of near-zero updates)
    "copy_bytes": (0.5, 1.25),  # e, GPU: copied bytes / planned bytes
}


@dataclass(frozen=True)
class Part:
    """A part of a check that runs in one process: `options` go to the worker, `env` is added
    to its environment."""

    name: str
    options: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)

    @property
    def label(self) -> str:
        values = (v if isinstance(v, str) else f"{k}{v}" for k, v in self.options.items())
        return "-".join([self.name, *values])  # "memory-fp16-ordering1"


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    parts: tuple  # Part, one process each
    gpu_only: bool = False  # the whole check needs a GPU (parts of others: their worker says)


CHECKS = (
    Check("a", "LMS ops survive Grappler and run where placed", (Part("placement"),)),
    Check(
        "b",
        "every copy back starts after its trigger",
        (Part("timing"),),
    ),
    Check(
        "c",
        "the peak drops as simulated, within 10 %, fp32 and mixed, orderings 0 and 1",
        # a process per row: a row's measured peak holds nothing of another's
        tuple(
            Part("memory", {"precision": precision, "ordering": ordering})
            for precision in ("fp32", "fp16")
            for ordering in (0, 1)
        ),
        gpu_only=True,
    ),
    Check("d", "which Grappler pass changed what", (Part("grappler"),)),
    Check(
        "e",
        "split pieces train as the plain step; a small pinned cap is a HostMemoryError",
        (Part("split"), Part("pinned", env={"TF_GPU_HOST_MEM_LIMIT_IN_MB": "1"})),
    ),
)
CHECK_TIMEOUT_S = 240  # per process; the five checks take about a minute here, a few on a GPU


def not_run(what: str, why: str) -> str:
    """A GPU-only part of a check process that did not run, in the words the run prints."""
    return f"GPU only, no GPU here: {what} ({why})"
