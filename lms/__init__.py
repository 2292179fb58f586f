"""Large Model Support for stock TensorFlow 2.x: swap tensors of a training step to host memory
and back so that what does not fit in device memory trains (lms/README.md).

    import lms
    step = lms.LMS(device_memory="16GiB").wrap(train_step)      # a tf.function step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # Keras

Logging goes to the `lms` logger (TFLMSv2's messages).

The public names, and the rule they follow: a name is public when a TensorFlow user calls it with
what they have (a step and its arguments, its graph, sizes, options, a link), or holds what such
a call answers with. They are:

- turning LMS on: `LMS`, `LMSFunction` (what `LMS.wrap` returns), `Options`, `check_options`,
  `Parameters`, `AUTO`, `parse_size`, `format_size`;
- the errors: `LMSError`, `ParameterError`, `NothingFitsError`, `HostMemoryError`;
- what a plan and its steps report: `PlanReport` and its parts (`AnalysisSummary`, `FloorOp`,
  `OpBytes`, `Timeline`), `SwapTraffic` (`LMSFunction.traffic()`), `DiskUsage`
  (`LMS.disk_usage()`);
- the host: `cpu_kernels()` (which kernels a CPU plan's peaks are counted for, as
  `PlanReport.kernels` names them), `check_host_memory` (LMS checks the host it runs on; a plan
  made for another host, which does not run here, is checked with this against that host's
  memory);
- the GPU path, checked on a step: `use_two_devices`, `check_step` and its `PlacementReport`,
  `profile_copies` (the bytes a GPU's copies moved), `grappler_replays` (what Grappler on a GPU
  would keep of the step's LMS ops, replayed here without one);
- projecting a step onto another link or GPU: `Link`, `named_links`, `project`, `Projection`,
  the profile and swaps it replays (`StepProfile`, `SwapGraph`: what `LMSFunction.profile()`
  returns), `profile_step` (any callable's ops and copies, e.g. a link's own copies), and for a
  GPU this machine does not have, a plan made for it (`LMSFunction.prepare`) timed by a roofline
  model: `roofline_profile`, `RooflineDevice`, `ROOFLINE_GPUS`, `swap_graph`.

What works on lms's own intermediate objects (the analysis, the planner, the simulator and its
allocator model, the tuner, the rewrite and its swap mechanisms, TensorFlow's private switches)
is in `lms.internal`, for people building on lms, without a stability promise. The names that
were public before (`lms.analyze`, `lms.plan`, `lms.simulate`, ...) still resolve here with a
DeprecationWarning naming their new place.

Names are imported on first use, so `lms.check_options`, `lms.Options`, `lms.parse_size`,
`lms.Parameters`, the report types and the errors cost no TensorFlow import: a program that only
checks a configuration or reads a record stays light. The same names are imported under
`TYPE_CHECKING` for editors and type checkers (tests/lms/test_init.py keeps both lists equal).
"""

import importlib
import warnings
from typing import TYPE_CHECKING

from lms.lazy import lazy_names

if TYPE_CHECKING:  # `X as X`: a re-export, as type checkers read it
    from lms.api import LMS as LMS
    from lms.device.host_memory import check_host_memory as check_host_memory
    from lms.device.target import use_two_devices as use_two_devices
    from lms.errors import HostMemoryError as HostMemoryError
    from lms.errors import LMSError as LMSError
    from lms.errors import NothingFitsError as NothingFitsError
    from lms.errors import ParameterError as ParameterError
    from lms.function import LMSFunction as LMSFunction
    from lms.graph.cpu_host import cpu_kernels as cpu_kernels
    from lms.observe.grappler_replay import grappler_replays as grappler_replays
    from lms.observe.placement import PlacementReport as PlacementReport
    from lms.observe.placement import check_step as check_step
    from lms.timing.profile import StepProfile as StepProfile
    from lms.timing.profile import profile_copies as profile_copies
    from lms.timing.profile import profile_step as profile_step
    from lms.timing.profile import swap_graph as swap_graph
    from lms.timing.roofline import ROOFLINE_GPUS as ROOFLINE_GPUS
    from lms.timing.roofline import RooflineDevice as RooflineDevice
    from lms.timing.roofline import roofline_profile as roofline_profile
    from lms.timing.steptime import Projection as Projection
    from lms.timing.steptime import SwapGraph as SwapGraph
    from lms.timing.steptime import project as project
    from lms.values.budget import format_size as format_size
    from lms.values.budget import parse_size as parse_size
    from lms.values.link import Link as Link
    from lms.values.link import named_links as named_links
    from lms.values.options import Options as Options
    from lms.values.options import check_options as check_options
    from lms.values.parameters import AUTO as AUTO
    from lms.values.parameters import Parameters as Parameters
    from lms.values.report import AnalysisSummary as AnalysisSummary
    from lms.values.report import DiskUsage as DiskUsage
    from lms.values.report import FloorOp as FloorOp
    from lms.values.report import OpBytes as OpBytes
    from lms.values.report import PlanReport as PlanReport
    from lms.values.report import SwapTraffic as SwapTraffic
    from lms.values.report import Timeline as Timeline

# public name -> the module that defines it
_EXPORTS = {
    "AUTO": "lms.values.parameters",
    "AnalysisSummary": "lms.values.report",
    "DiskUsage": "lms.values.report",
    "FloorOp": "lms.values.report",
    "HostMemoryError": "lms.errors",
    "LMS": "lms.api",
    "LMSError": "lms.errors",
    "LMSFunction": "lms.function",
    "Link": "lms.values.link",
    "NothingFitsError": "lms.errors",
    "OpBytes": "lms.values.report",
    "Options": "lms.values.options",
    "ParameterError": "lms.errors",
    "Parameters": "lms.values.parameters",
    "PlacementReport": "lms.observe.placement",
    "PlanReport": "lms.values.report",
    "Projection": "lms.timing.steptime",
    "ROOFLINE_GPUS": "lms.timing.roofline",
    "RooflineDevice": "lms.timing.roofline",
    "StepProfile": "lms.timing.profile",
    "SwapGraph": "lms.timing.steptime",
    "SwapTraffic": "lms.values.report",
    "Timeline": "lms.values.report",
    "check_host_memory": "lms.device.host_memory",
    "check_options": "lms.values.options",
    "check_step": "lms.observe.placement",
    "cpu_kernels": "lms.graph.cpu_host",
    "format_size": "lms.values.budget",
    "grappler_replays": "lms.observe.grappler_replay",
    "named_links": "lms.values.link",
    "parse_size": "lms.values.budget",
    "profile_copies": "lms.timing.profile",
    "profile_step": "lms.timing.profile",
    "project": "lms.timing.steptime",
    "roofline_profile": "lms.timing.roofline",
    "swap_graph": "lms.timing.profile",
    "use_two_devices": "lms.device.target",
}
__all__ = sorted(_EXPORTS)

# public until issue 42: resolved from lms.internal with a DeprecationWarning (not in __all__)
_MOVED = frozenset(
    {
        "Analysis",
        "BestFitAllocator",
        "DeviceCopy",
        "HostStore",
        "Plan",
        "Simulation",
        "Tuned",
        "analyze",
        "cpu_paired_reads",
        "explain_peak",
        "gpu_memory_bytes",
        "onednn_enabled",
        "plan",
        "simulate",
        "tune",
    }
)


def _moved(name: str):
    """`lms.internal` (loaded on first use, like a name) and the names that moved there."""
    if name == "internal":
        return importlib.import_module("lms.internal")
    if name not in _MOVED:
        raise AttributeError(f"module 'lms' has no attribute {name!r}")
    warnings.warn(
        f"lms.{name} moved to lms.internal.{name} (not public: no stability promise)",
        DeprecationWarning,
        stacklevel=3,
    )
    return getattr(importlib.import_module("lms.internal"), name)


__getattr__, __dir__ = lazy_names(globals(), _EXPORTS, _moved)
