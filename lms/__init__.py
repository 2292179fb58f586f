"""Large Model Support for stock TensorFlow 2.x: swap tensors of a training step to host memory
and back so that what does not fit in device memory trains.

    import lms
    step = lms.LMS(device_memory="16GiB").wrap(train_step)      # a tf.function step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # Keras

Logging goes to the `lms` logger (TFLMSv2's messages).

Names are imported on first use, so `lms.check_options`, `lms.Options`, `lms.parse_size`,
`lms.Parameters`, the report types and the errors cost no TensorFlow import: a program that only
checks a configuration or reads a record stays light. The same names are imported under
`TYPE_CHECKING` for editors and type checkers (tests/lms/test_init.py keeps both lists equal).
"""

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # `X as X`: a re-export, as type checkers read it
    from lms._tf_private import onednn_enabled as onednn_enabled
    from lms.allocator import BestFitAllocator as BestFitAllocator
    from lms.analysis import analyze as analyze
    from lms.analysis import cpu_paired_reads as cpu_paired_reads
    from lms.api import LMS as LMS
    from lms.budget import (
        format_size as format_size,
    )
    from lms.budget import (
        gpu_memory_bytes as gpu_memory_bytes,
    )
    from lms.budget import (
        parse_size as parse_size,
    )
    from lms.errors import (
        HostMemoryError as HostMemoryError,
    )
    from lms.errors import (
        LMSError as LMSError,
    )
    from lms.errors import (
        NothingFitsError as NothingFitsError,
    )
    from lms.errors import (
        ParameterError as ParameterError,
    )
    from lms.explain import explain_peak as explain_peak
    from lms.function import LMSFunction as LMSFunction
    from lms.graph import Analysis as Analysis
    from lms.grappler_replay import grappler_replays as grappler_replays
    from lms.host_memory import check_host_memory as check_host_memory
    from lms.link import Link as Link
    from lms.link import named_links as named_links
    from lms.options import Options as Options
    from lms.options import check_options as check_options
    from lms.parameters import AUTO as AUTO
    from lms.parameters import Parameters as Parameters
    from lms.placement import PlacementReport as PlacementReport
    from lms.placement import check_step as check_step
    from lms.planner import Plan as Plan
    from lms.planner import plan as plan
    from lms.profile import (
        StepProfile as StepProfile,
    )
    from lms.profile import profile_copies as profile_copies
    from lms.profile import (
        profile_step as profile_step,
    )
    from lms.profile import (
        swap_graph as swap_graph,
    )
    from lms.report import (
        AnalysisSummary as AnalysisSummary,
    )
    from lms.report import (
        FloorOp as FloorOp,
    )
    from lms.report import (
        OpBytes as OpBytes,
    )
    from lms.report import (
        PlanReport as PlanReport,
    )
    from lms.report import (
        SwapTraffic as SwapTraffic,
    )
    from lms.report import (
        Timeline as Timeline,
    )
    from lms.roofline import (
        ROOFLINE_GPUS as ROOFLINE_GPUS,
    )
    from lms.roofline import (
        RooflineDevice as RooflineDevice,
    )
    from lms.roofline import (
        roofline_profile as roofline_profile,
    )
    from lms.simulator import Simulation as Simulation
    from lms.simulator import simulate as simulate
    from lms.steptime import Projection as Projection
    from lms.steptime import SwapGraph as SwapGraph
    from lms.steptime import project as project
    from lms.swap import DeviceCopy as DeviceCopy
    from lms.swap import HostStore as HostStore
    from lms.target import use_two_devices as use_two_devices
    from lms.tuner import Tuned as Tuned
    from lms.tuner import tune as tune

# public name -> the module that defines it
_EXPORTS = {
    "AUTO": "lms.parameters",
    "Analysis": "lms.graph",
    "AnalysisSummary": "lms.report",
    "BestFitAllocator": "lms.allocator",
    "DeviceCopy": "lms.swap",
    "FloorOp": "lms.report",
    "HostMemoryError": "lms.errors",
    "HostStore": "lms.swap",
    "LMS": "lms.api",
    "LMSError": "lms.errors",
    "LMSFunction": "lms.function",
    "Link": "lms.link",
    "NothingFitsError": "lms.errors",
    "OpBytes": "lms.report",
    "Options": "lms.options",
    "ParameterError": "lms.errors",
    "Parameters": "lms.parameters",
    "Plan": "lms.planner",
    "PlanReport": "lms.report",
    "Projection": "lms.steptime",
    "ROOFLINE_GPUS": "lms.roofline",
    "RooflineDevice": "lms.roofline",
    "Simulation": "lms.simulator",
    "StepProfile": "lms.profile",
    "SwapGraph": "lms.steptime",
    "SwapTraffic": "lms.report",
    "Timeline": "lms.report",
    "Tuned": "lms.tuner",
    "analyze": "lms.analysis",
    "check_host_memory": "lms.host_memory",
    "check_options": "lms.options",
    "cpu_paired_reads": "lms.analysis",
    "explain_peak": "lms.explain",
    "format_size": "lms.budget",
    "gpu_memory_bytes": "lms.budget",
    "named_links": "lms.link",
    "onednn_enabled": "lms._tf_private",
    "parse_size": "lms.budget",
    "plan": "lms.planner",
    "profile_step": "lms.profile",
    "project": "lms.steptime",
    "roofline_profile": "lms.roofline",
    "simulate": "lms.simulator",
    "swap_graph": "lms.profile",
    "tune": "lms.tuner",
    "use_two_devices": "lms.target",
    "PlacementReport": "lms.placement",
    "check_step": "lms.placement",
    "grappler_replays": "lms.grappler_replay",
    "profile_copies": "lms.profile",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'lms' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))
