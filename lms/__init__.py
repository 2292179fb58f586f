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
    from lms.api import LMS as LMS
    from lms.device.host_memory import check_host_memory as check_host_memory
    from lms.device.swap import DeviceCopy as DeviceCopy
    from lms.device.swap import HostStore as HostStore
    from lms.device.target import use_two_devices as use_two_devices
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
    from lms.function import LMSFunction as LMSFunction
    from lms.graph.step import Analysis as Analysis
    from lms.memory.allocator import BestFitAllocator as BestFitAllocator
    from lms.memory.explain import explain_peak as explain_peak
    from lms.memory.simulator import Simulation as Simulation
    from lms.memory.simulator import simulate as simulate
    from lms.observe.grappler_replay import grappler_replays as grappler_replays
    from lms.observe.placement import PlacementReport as PlacementReport
    from lms.observe.placement import check_step as check_step
    from lms.planning.planner import Plan as Plan
    from lms.planning.planner import plan as plan
    from lms.timing.profile import (
        StepProfile as StepProfile,
    )
    from lms.timing.profile import profile_copies as profile_copies
    from lms.timing.profile import (
        profile_step as profile_step,
    )
    from lms.timing.profile import (
        swap_graph as swap_graph,
    )
    from lms.timing.roofline import (
        ROOFLINE_GPUS as ROOFLINE_GPUS,
    )
    from lms.timing.roofline import (
        RooflineDevice as RooflineDevice,
    )
    from lms.timing.roofline import (
        roofline_profile as roofline_profile,
    )
    from lms.timing.steptime import Projection as Projection
    from lms.timing.steptime import SwapGraph as SwapGraph
    from lms.timing.steptime import project as project
    from lms.tuning.analysis import analyze as analyze
    from lms.tuning.analysis import cpu_paired_reads as cpu_paired_reads
    from lms.tuning.tuner import Tuned as Tuned
    from lms.tuning.tuner import tune as tune
    from lms.values.budget import (
        format_size as format_size,
    )
    from lms.values.budget import (
        gpu_memory_bytes as gpu_memory_bytes,
    )
    from lms.values.budget import (
        parse_size as parse_size,
    )
    from lms.values.link import Link as Link
    from lms.values.link import named_links as named_links
    from lms.values.options import Options as Options
    from lms.values.options import check_options as check_options
    from lms.values.parameters import AUTO as AUTO
    from lms.values.parameters import Parameters as Parameters
    from lms.values.report import (
        AnalysisSummary as AnalysisSummary,
    )
    from lms.values.report import (
        FloorOp as FloorOp,
    )
    from lms.values.report import (
        OpBytes as OpBytes,
    )
    from lms.values.report import (
        PlanReport as PlanReport,
    )
    from lms.values.report import (
        SwapTraffic as SwapTraffic,
    )
    from lms.values.report import (
        Timeline as Timeline,
    )

# public name -> the module that defines it
_EXPORTS = {
    "AUTO": "lms.values.parameters",
    "Analysis": "lms.graph.step",
    "AnalysisSummary": "lms.values.report",
    "BestFitAllocator": "lms.memory.allocator",
    "DeviceCopy": "lms.device.swap",
    "FloorOp": "lms.values.report",
    "HostMemoryError": "lms.errors",
    "HostStore": "lms.device.swap",
    "LMS": "lms.api",
    "LMSError": "lms.errors",
    "LMSFunction": "lms.function",
    "Link": "lms.values.link",
    "NothingFitsError": "lms.errors",
    "OpBytes": "lms.values.report",
    "Options": "lms.values.options",
    "ParameterError": "lms.errors",
    "Parameters": "lms.values.parameters",
    "Plan": "lms.planning.planner",
    "PlanReport": "lms.values.report",
    "Projection": "lms.timing.steptime",
    "ROOFLINE_GPUS": "lms.timing.roofline",
    "RooflineDevice": "lms.timing.roofline",
    "Simulation": "lms.memory.simulator",
    "StepProfile": "lms.timing.profile",
    "SwapGraph": "lms.timing.steptime",
    "SwapTraffic": "lms.values.report",
    "Timeline": "lms.values.report",
    "Tuned": "lms.tuning.tuner",
    "analyze": "lms.tuning.analysis",
    "check_host_memory": "lms.device.host_memory",
    "check_options": "lms.values.options",
    "cpu_paired_reads": "lms.tuning.analysis",
    "explain_peak": "lms.memory.explain",
    "format_size": "lms.values.budget",
    "gpu_memory_bytes": "lms.values.budget",
    "named_links": "lms.values.link",
    "onednn_enabled": "lms._tf_private",
    "parse_size": "lms.values.budget",
    "plan": "lms.planning.planner",
    "profile_step": "lms.timing.profile",
    "project": "lms.timing.steptime",
    "roofline_profile": "lms.timing.roofline",
    "simulate": "lms.memory.simulator",
    "swap_graph": "lms.timing.profile",
    "tune": "lms.tuning.tuner",
    "use_two_devices": "lms.device.target",
    "PlacementReport": "lms.observe.placement",
    "check_step": "lms.observe.placement",
    "grappler_replays": "lms.observe.grappler_replay",
    "profile_copies": "lms.timing.profile",
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
