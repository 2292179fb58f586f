"""The tools lms is made of, for people building on it: no stability promise (names, signatures
and types change with lms's internals; docs/lms.md says what each stage does). A user of LMS
needs the public names of `lms` only (lms/__init__.py says which and why).

    from lms import internal
    analysis = internal.analyze(step.get_concrete_function(*args).graph)
    plan = internal.plan(analysis, lms.Parameters(1, 1, 0))
    peak = internal.simulate(analysis, plan, internal.BestFitAllocator).peak_bytes

- analysis: `analyze` (a step's graph as tensors, ops and their order: an `Analysis`),
  `cpu_paired_reads` (the reads oneDNN's fused kernels pair on this CPU);
- planning: `plan` (an analysis and `lms.Parameters` to a `Plan` of swaps);
- simulation: `simulate` (a plan's device and host memory over one step: a `Simulation`),
  `BestFitAllocator` (TensorFlow's BFC allocator's chunks), `explain_peak` (what is live at
  the peak, and why);
- tuning: `tune` (the parameters whose plan fits a budget: a `Tuned`);
- the rewrite and its mechanisms: `rewrite` (a concrete function with a plan's swap ops),
  `HostStore` (the emulated device's host memory), `DeviceCopy` (a GPU's copies);
- this machine: `gpu_memory_bytes` (a GPU's memory from NVML), `onednn_enabled` (whether
  TensorFlow's CPU kernels are oneDNN's; `lms.cpu_kernels()` is the public answer).

Names load on first use, as in `lms`; the `TYPE_CHECKING` imports mirror `_EXPORTS`
(tests/lms/test_init.py keeps both lists equal).
"""

from typing import TYPE_CHECKING

from lms.lazy import lazy_names

if TYPE_CHECKING:  # `X as X`: a re-export, as type checkers read it
    from lms._tf_private import onednn_enabled as onednn_enabled
    from lms.device.copies import DeviceCopy as DeviceCopy
    from lms.device.host_store import HostStore as HostStore
    from lms.device.rewriter import rewrite as rewrite
    from lms.graph.step import Analysis as Analysis
    from lms.memory.allocator import BestFitAllocator as BestFitAllocator
    from lms.memory.explain import explain_peak as explain_peak
    from lms.memory.simulator import Simulation as Simulation
    from lms.memory.simulator import simulate as simulate
    from lms.planning.planner import Plan as Plan
    from lms.planning.planner import plan as plan
    from lms.tuning.analysis import analyze as analyze
    from lms.tuning.analysis import cpu_paired_reads as cpu_paired_reads
    from lms.tuning.tuner import Tuned as Tuned
    from lms.tuning.tuner import tune as tune
    from lms.values.budget import gpu_memory_bytes as gpu_memory_bytes

# name -> the module that defines it
_EXPORTS = {
    "Analysis": "lms.graph.step",
    "BestFitAllocator": "lms.memory.allocator",
    "DeviceCopy": "lms.device.copies",
    "HostStore": "lms.device.host_store",
    "Plan": "lms.planning.planner",
    "Simulation": "lms.memory.simulator",
    "Tuned": "lms.tuning.tuner",
    "analyze": "lms.tuning.analysis",
    "cpu_paired_reads": "lms.tuning.analysis",
    "explain_peak": "lms.memory.explain",
    "gpu_memory_bytes": "lms.values.budget",
    "onednn_enabled": "lms._tf_private",
    "plan": "lms.planning.planner",
    "rewrite": "lms.device.rewriter",
    "simulate": "lms.memory.simulator",
    "tune": "lms.tuning.tuner",
}
__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_names(globals(), _EXPORTS)
