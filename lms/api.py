"""`LMS`: enable Large Model Support in one line.

    step = lms.LMS(device_memory="16GiB").wrap(train_step)   # a tf.function training step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # or as a Keras callback

On the first call for a given input signature the step is traced, analysed, its parameters tuned
against the memory budget, and its graph rewritten with swaps; later calls run the rewritten step.
"""

import functools
import logging
import os
import time

import keras
import tensorflow as tf

from lms import _tf_private
from lms.allocator import BestFitAllocator, cpu_allocator_limit
from lms.analysis import analyze, cpu_paired_reads
from lms.budget import budget_bytes, format_size, gpu_memory_bytes
from lms.calibration import (
    CALIBRATION_STEPS,
    MAX_CORRECTIONS,
    Calibration,
    CalibrationCache,
    PeakMeter,
    fingerprint,
)
from lms.errors import LMSError, NothingFitsError, ParameterError
from lms.explain import explain_peak
from lms.lifetimes import largest_footprint
from lms.options import check_options
from lms.parameters import Parameters
from lms.planner import log_plan, plan
from lms.rewriter import REWRITTEN_MARK, rewrite
from lms.simulator import simulate
from lms.steptime import SwapGraph
from lms.swap import DeviceCopy, HostStore, Traffic
from lms.tuner import Tuned, floor_parameters, tune

log = logging.getLogger("lms")
# Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0, CPUs without AVX-512, aarch64 under qemu) are
# modelled (lms/kernels.py): GoogLeNet 96x96 b2 everything swapped, measured / simulated went
# from 1.85-1.90x to 0.92-1.01x (benchmarks/cpu_kernels_peak.py; oneDNN 1.07-1.10x). Left: their
# gradients' 25-30 MiB buffers (3D: up to 25x their tensors) make the peak in TensorFlow's own
# order depend on which two run side by side and where the allocator puts them: the 3D U-Net
# 16^3 b2, everything swapped in that order, measured 294-441 MiB against 319-327 simulated.
EIGEN_KERNELS_WARNING = (
    "This TensorFlow computes on the CPU with Eigen's kernels, not oneDNN's: LMS models their "
    "convolution gradients' working-set buffers, but in TensorFlow's own order which of them "
    "coincide varies between processes, so the device peak can exceed the plan's by up to "
    "~35 % (3D U-Net 16^3); leave margin with safety_ratio, let LMS enforce its order "
    "(ordering=1), or enable oneDNN"
)


def _has_gpu() -> bool:
    return bool(tf.config.list_physical_devices("GPU"))


def _memory_growth() -> bool:
    """Whether TensorFlow grows the first GPU's memory by regions (GPU only; False without one)."""
    if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true":
        return True
    gpus = tf.config.list_physical_devices("GPU")
    return bool(gpus) and bool(tf.config.experimental.get_memory_growth(gpus[0]))


def _ordered(tuned) -> bool:
    return tuned is not None and tuned.plan is not None and tuned.plan.order is not None


class LMSFunction:
    """A training step with LMS: call it like the tf.function it wraps."""

    def __init__(self, lms: "LMS", function):
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        self.lms, self.function = lms, function
        self._prepared = {}
        self._calibrations = {}  # input signature -> the closed loop's Calibration
        self._free_order = False  # TensorFlow refused an enforced order: plan in its own
        self._floor_measured = set()  # signatures whose plan that swaps the most was measured
        self._warned_leftovers = False
        self._traffic, self._steps = Traffic(), 0
        self._copies = None  # GPU: a profiled step's copy events (lms.copy_events.copy_totals)

    @staticmethod
    def _key(args):
        return tuple(
            (tuple(a.shape.as_list()), a.dtype.name)
            if hasattr(a, "shape") and hasattr(a, "dtype")
            else repr(a)
            for a in tf.nest.flatten(args)
        )

    def prepare(self, *args):
        """Trace, analyse, tune and rewrite for these arguments (tensors or TensorSpecs)."""
        key = self._key(args)
        if key not in self._prepared:
            calibration = None
            if self.lms.calibration_steps:
                calibration = self.lms._new_calibration()
                self._calibrations[key] = calibration
            self._prepared[key] = self.lms._prepare(self.function, args, calibration=calibration)
        return self._prepared[key]

    @property
    def calibrating(self) -> bool:
        """Whether the closed loop is still measuring a plan (of any input signature): the
        steps until it holds may run over the budget, and each correction re-plans and
        rewrites the step (lms/calibration.py)."""
        return any(not c.accepted for c in self._calibrations.values())

    @property
    def plans(self) -> int:
        """How many plans were made so far (all input signatures): grows with each of the
        closed loop's corrections."""
        return sum(len(c.attempts) for c in self._calibrations.values()) or len(self._prepared)

    def __call__(self, *args):
        """One step. The host store is empty after it, whatever ran: a step runs to its end
        before the call returns, so what is left would never be read (a swap-in that did not
        run) or belongs to a step that failed. One step at a time per LMS object.

        While a plan is new, the step's device peak is measured (the closed loop): a step over
        the budget makes the next one run a plan made for less; a step that fails for lack of
        device memory (GPU) is planned again and run again. TensorFlow cannot undo what such a
        step did before it failed: variables it had already updated are updated again (with an
        enforced order the updates come last, after the memory-hungry backward pass)."""
        key = self._key(args)
        callable_, tuned = self.prepare(*args)
        calibration = self._calibrations.get(key)
        meter = self.lms._peak_meter() if calibration is not None else None
        measured = meter is not None and not calibration.skip_measure()
        if measured and not calibration.accepted:
            meter.reset()
        store = self.lms.store
        try:
            result = callable_(*args)
        except tf.errors.ResourceExhaustedError:
            if store is not None:
                store.clear()
            if calibration is None or meter is None:
                raise
            calibration.out_of_memory(meter.peak())
            try:
                self._correct(key, args, calibration)
            finally:
                self.lms._show_loop(calibration)
            return self(*args)
        except Exception as error:
            if store is not None:
                store.clear()
            refused = isinstance(error, tf.errors.InvalidArgumentError) and "in a cycle" in str(
                error
            )
            if not (refused and _ordered(tuned)):
                raise
            result = self._without_order(args, error)
        count, size = store.clear() if store is not None else (0, 0)
        self._steps += 1
        if store is not None:
            self._traffic.add(store.take_traffic())
        if count and not self._warned_leftovers:
            self._warned_leftovers = True
            log.warning(
                "%d swapped-out tensors (%d bytes) were not swapped back in during the step "
                "(their swap-ins did not run); freed after each step",
                count,
                size,
            )
        if measured:
            accepted = calibration.accepted
            try:
                if calibration.observe(meter.peak()):
                    self._correct(key, args, calibration)
                elif calibration.accepted and not accepted:
                    self.lms._calibrated(self._prepared[key][1].parameters, calibration)
            finally:
                self.lms._show_loop(calibration)
        return result

    def _correct(self, key, args, calibration: Calibration) -> None:
        """The plan overran: plan again for the budget the loop asks (from a fresh trace: the
        rewrite edited the last one), or keep it when the loop says so. Parameters the user
        gave all of are applied as given (TFLMSv2's behaviour): the overrun is only reported."""
        if not self.lms.parameters.needs_tuning:
            attempt = calibration.current
            log.warning(
                "LMS: the given parameters' measured peak %s is over the budget %s; they are "
                "applied as given (let one be -1 to have them corrected)",
                format_size(attempt.measured_peak_bytes),
                format_size(calibration.limit_bytes),
            )
            calibration.accepted = True
            return
        budget = calibration.next_budget()
        if budget is not None:
            self.function = _retraced(self.function)
            parameters = self.lms.parameters
            if self._free_order:  # TensorFlow refused the enforced order on this step
                parameters = parameters.resolved(ordering=0)
            try:
                self._prepared[key] = self.lms._prepare(
                    self.function, args, parameters, budget=budget, calibration=calibration
                )
                return
            except NothingFitsError as error:  # the last plan's callable stays in place
                why = f"nothing fits {format_size(budget)} in simulation ({error.args[0]})"
        else:
            why = f"after {calibration.corrections} corrections"
        # the simulation ranks plans, and can rank them wrongly: before giving up, measure the
        # plan that swaps the most (every tensor a far reader reads, back one op ahead)
        asked = self.lms.parameters
        floor = floor_parameters(asked.resolved(ordering=0) if self._free_order else asked)
        if key in self._floor_measured:
            calibration.keep_or_fail(why)
            return
        self._floor_measured.add(key)
        log.warning("LMS: %s; measuring the plan that swaps the most", why)
        self.function = _retraced(self.function)
        self._prepared[key] = self.lms._prepare(
            self.function, args, floor, budget=budget or calibration.current.budget_bytes,
            calibration=calibration,
        )  # fmt: skip

    def _without_order(self, args, error):
        """TensorFlow refused the enforced order before running anything: a graph pass fused two
        ops with chain or swap-in edges between them, which makes a cycle. With ordering -1,
        plan again in TensorFlow's own order (from a fresh trace: the rewrite edited the first)
        and run that; a user's explicit ordering=1 gets the error instead."""
        if self.lms.parameters.ordering == 1:
            raise LMSError(
                "ordering=1 cannot be enforced on this step: a TensorFlow graph pass fused ops "
                f"across the order's control dependencies ({error.message}); use ordering=0 "
                "or -1"
            ) from None
        log.warning(
            "The enforced op order made a cycle after TensorFlow's graph passes (%s); "
            "planning again in TensorFlow's own order",
            error.message,
        )
        self.function = _retraced(self.function)
        self._free_order = True
        parameters = self.lms.parameters.resolved(ordering=0)
        key = self._key(args)
        calibration = self._calibrations.get(key)
        budget = calibration.current.budget_bytes if calibration is not None else None
        if calibration is not None:
            calibration.attempts.pop()  # that plan never ran
        self._prepared[key] = self.lms._prepare(
            self.function, args, parameters, budget=budget, calibration=calibration, closest=True
        )
        if calibration is not None:
            calibration.skip_measure()  # this run is the new plan's first
        return self._prepared[key][0](*args)

    @property
    def report(self) -> dict | None:
        """What the last preparation planned (see `LMS.report`)."""
        return self.lms.report

    def profile(self, *args):
        """Run one step under TensorFlow's profiler: (lms.StepProfile of its ops, lms.SwapGraph
        of its swaps), what `lms.project` replays on another link. Run a step first: the first
        call traces, plans and rewrites."""
        from lms.copy_events import copy_totals
        from lms.profile import profiled_space, step_profile, swap_graph

        callable_, _ = self.prepare(*args)
        space = profiled_space(self, *args)
        profile = step_profile(space)
        if profile.copies:  # GPU only: the copies' own bytes and durations, from the same step
            self._copies = copy_totals(space)
        graph = getattr(callable_, "graph", None)
        swaps = swap_graph(graph, self.lms.batch_size) if graph is not None else SwapGraph({})
        return profile, swaps

    def reset_traffic(self) -> None:
        """Forget the swap traffic counted so far (e.g. after warm-up steps)."""
        if self.lms.store is not None:
            self.lms.store.take_traffic()
        self._traffic, self._steps = Traffic(), 0

    def traffic(self) -> dict | None:
        """The swap traffic per step since the last `reset_traffic` (None before any step).

        Swaps and bytes each way: on the emulated device counted in the host store; with device
        copies (a GPU) the plan's, as every swap op runs once per step. Seconds and bandwidth only
        where a copy's own duration was measured, as `copy` says:
        - "emulated link": the link's transfers, each from when its engine began it to its end;
        - "none": the emulated device without a link, where nothing crosses one;
        - "GPU copy events": the copy engines' events of the last `profile()` step, all of its
          host<->device copies (lms/copy_events.py);
        - "not profiled": a GPU step before any `profile()`.
        `version` 2: older records' seconds timed the swap ops' bookkeeping, not a copy."""
        if not self._steps:
            return None
        steps, link = self._steps, self.lms.link
        timed = {}  # direction -> (bytes, seconds) per step, of copies whose duration was measured
        if self.lms._mechanism_kind() == "host-store":
            t, source = self._traffic, "host-store"
            copy = "emulated link" if link is not None else "none"
            if link is not None:
                timed = {
                    "out": (t.out_bytes / steps, t.out_transfer_seconds / steps),
                    "in": (t.in_bytes / steps, t.in_transfer_seconds / steps),
                }
        else:
            report = self.lms.report or {}
            t = Traffic(
                report.get("swapped_tensors", 0) * steps,
                report.get("swap_ins", 0) * steps,
                report.get("swapped_bytes", 0) * steps,
                report.get("swapped_in_bytes", 0) * steps,
            )
            source, copy = "plan", "not profiled"
            if self._copies is not None:
                copy = "GPU copy events"
                timed = {d: (nbytes, spent) for d, (_, nbytes, spent) in self._copies.items()}
        traffic = {
            "version": 2,
            "source": source,
            "copy": copy,
            "steps": steps,
            "swap_outs_per_step": t.swap_outs / steps,
            "swap_ins_per_step": t.swap_ins / steps,
            "out_bytes_per_step": t.out_bytes / steps,
            "in_bytes_per_step": t.in_bytes / steps,
            "link": None if link is None else link.as_dict(),
        }
        for direction in ("out", "in"):
            nbytes, spent = timed.get(direction, (0, None))
            traffic[f"{direction}_seconds_per_step"] = spent
            traffic[f"{direction}_bandwidth"] = nbytes / spent if spent else None
        return traffic


class LMS(keras.callbacks.Callback):
    """Large Model Support for a TensorFlow 2 training step.

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
        "host-store" or "device-copy".
    batch_size: substitutes an unknown leading dimension when sizing tensors.
    plot: path of a PNG of the simulated memory over the step, with and without LMS.
    allocator: "bfc" (default) checks the plan with the chunks TensorFlow's BFC allocator would
        give its allocations (lms/allocator.py; up to twice the bytes asked each) and tunes again
        if that padding pushes it over the budget; None plans with the bytes asked only.
    link: on the emulated device, an `lms.Link` or {"bandwidth": "16GB/s", "latency": "10us"}
        the host store's copies are slowed to, so that link speed changes measured throughput
        (lms/link.py); a GPU's copies take its real link.
    calibration_steps: steps whose device peak is measured before a plan is trusted (the closed
        loop, lms/calibration.py): a measured peak over the budget re-plans for a budget lowered
        by the excess and rewrites the step. 0 turns the loop off (plans are only simulated).
    max_corrections: re-plans before the loop gives up (NothingFitsError naming the measured
        peaks; a plan over the budget but under the device memory is then kept with a warning).
    calibration_cache: path of a JSON file where corrected budgets are kept by the step's graph
        and device, so that the next run starts from the plan that held.
    """

    def __init__(
        self,
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
    ):
        super().__init__()
        checked = check_options(
            device_memory,
            swapout_threshold=swapout_threshold,
            swapin_ahead=swapin_ahead,
            swapin_groupby=swapin_groupby,
            sync_mode=sync_mode,
            serialization=serialization,
            serialization_by_size=serialization_by_size,
            ordering=ordering,
            reserve=reserve,
            safety_ratio=safety_ratio,
            mechanism=mechanism,
            batch_size=batch_size,
            plot=plot,
            allocator=allocator,
            link=link,
            calibration_steps=calibration_steps,
            max_corrections=max_corrections,
            calibration_cache=calibration_cache,
        )
        self.parameters = checked["parameters"]
        self.calibration_steps = calibration_steps
        self.max_corrections = max_corrections
        self.cache = CalibrationCache(calibration_cache) if calibration_cache else None
        self.link = checked["link"]
        device_bytes = checked["device_bytes"]
        if device_bytes is None:
            device_bytes = gpu_memory_bytes() if _has_gpu() else None
            if device_bytes is None:
                raise ParameterError(
                    "device_memory is required without a readable GPU (on the emulated device it "
                    "is the memory budget), e.g. LMS(device_memory='2GiB')"
                )
        self.budget = budget_bytes(device_bytes, reserve, safety_ratio)
        self.device_limit = budget_bytes(device_bytes, reserve, 1.0)  # the reserve taken off
        self.safety_ratio = safety_ratio
        self.mechanism_name = mechanism
        self.allocator_name = allocator
        self.device_bytes = device_bytes
        self.batch_size, self.plot_path = batch_size, plot
        self.store = None
        self.report = None
        self._fingerprint = None  # of the last step planned, for the calibration cache
        self._meter = None  # the closed loop's PeakMeter, made on first use
        self._shortfall = None  # why nothing fit in simulation, when the closest plan is run

    def wrap(self, function) -> LMSFunction:
        """The step `function` (a tf.function or a Python function of tensors) with LMS."""
        return LMSFunction(self, function)

    def _allocator(self):
        """A factory of the allocator model plans are checked with, or None (bytes asked only).
        A GPU's allocator holds all its memory in one region unless memory growth is on
        (TensorFlow's default: off). The emulated device's is the CPU's, which grows by regions
        up to its own limit, not the device memory LMS plans for: regions double past the
        budget (GoogLeNet 1216² b2 everything swapped for 640 MiB: modelled with regions capped
        at 640 MiB 693 MiB, with the CPU's limit 623, measured 610-625)."""
        if self.allocator_name is None:
            return None
        if self._mechanism_kind() == "device-copy":
            return functools.partial(BestFitAllocator, self.device_bytes, _memory_growth())
        return functools.partial(BestFitAllocator, cpu_allocator_limit(), True)

    def _mechanism_kind(self) -> str:
        name = self.mechanism_name
        if name == "auto":
            name = "device-copy" if _has_gpu() else "host-store"
        return name

    def _meter_device(self) -> str:
        """The device whose allocator the closed loop reads: the GPU's with device copies, the
        CPU's on the emulated device."""
        return "GPU:0" if self._mechanism_kind() == "device-copy" else "CPU:0"

    def _kernels(self) -> str:
        """The kernel set the step computes with (lms/kernels.py): the emulated device's are
        this TensorFlow's CPU kernels (oneDNN's or Eigen's)."""
        from lms.kernels import cpu_kernels

        return cpu_kernels() if self._mechanism_kind() == "host-store" else "gpu"

    def _device_key(self) -> str:
        """What besides the graph a calibration holds for: device, memory, kernels, versions."""
        return (
            f"{self._mechanism_kind()}|{self.device_bytes}|{self.budget}|{self._kernels()}|"
            f"tf{tf.__version__}|{self.parameters}|{self.allocator_name}"
        )

    def _peak_meter(self) -> PeakMeter | None:
        """The device's allocator statistics for the closed loop, or None: the loop is off, or
        TensorFlow keeps no statistics for the device (then plans are only simulated)."""
        if not self.calibration_steps:
            return None
        if self._meter is None:
            self._meter = PeakMeter(self._meter_device())
            if not self._meter.available:
                log.warning(
                    "LMS cannot measure the step's peak on %s (on the emulated device set "
                    "TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow starts): its plans are "
                    "checked in simulation only",
                    self._meter.device,
                )
        return self._meter if self._meter.available else None

    def _new_calibration(self) -> Calibration:
        return Calibration(
            self.budget, self.device_limit, self.calibration_steps, self.max_corrections
        )

    def _calibrated(self, parameters, calibration: Calibration) -> None:
        """A plan held: keep its budget and parameters in the cache when the loop had to
        correct it."""
        if self.cache is not None and calibration.corrections and self._fingerprint:
            self.cache.store(self._fingerprint, calibration, parameters.as_dict())

    def _mechanism(self):
        name = self._mechanism_kind()
        if name == "device-copy":
            if self.link is not None:
                raise ParameterError(
                    "link emulates a link on the emulated device; this LMS copies through a GPU"
                )
            return DeviceCopy()
        if self.store is None:
            self.store = HostStore(self.link)
        return self.store

    def _analyse_and_tune(
        self, function, args, keep_closest: bool, parameters=None, budget=None, cached=False
    ):
        """Trace for `args`, analyse, tune for `budget` (default: the LMS's); with
        `keep_closest`, a budget nothing meets gives the closest plan instead of
        NothingFitsError. With `cached`, a budget the calibration cache holds for this step
        replaces the default."""
        started = time.perf_counter()
        concrete = function.get_concrete_function(*args)
        if getattr(concrete.graph, REWRITTEN_MARK, False):
            # another LMS object rewrote this trace in place (one step wrapped twice, e.g. at two
            # budgets): analysing it would plan on top of its swaps and order; trace afresh
            concrete = tf.function(function.python_function).get_concrete_function(*args)
        traced = time.perf_counter()
        if self.cache is not None:
            self._fingerprint = fingerprint(concrete.graph, self._device_key())
            entry = self.cache.entry(self._fingerprint) if cached and budget is None else None
            if entry is not None:  # the plan that held last time: its budget and parameters
                budget = entry["budget_bytes"]
                if entry.get("parameters"):
                    parameters = Parameters(**entry["parameters"])
                log.info(
                    "LMS: planning for %s with the parameters that held last time (calibration "
                    "cache %s)",
                    format_size(budget),
                    self.cache.path,
                )
        budget = budget or self.budget
        on_cpu = self._mechanism_kind() == "host-store"  # the emulated device computes there
        if on_cpu and not _tf_private.onednn_enabled():
            log.warning(EIGEN_KERNELS_WARNING)
        analysis = self._analyse(concrete, cpu_paired_reads() if on_cpu else frozenset())
        if analysis.loops:
            log.warning(loops_warning(analysis.loops))
        analysed = time.perf_counter()
        try:
            analysis, tuned = self._tune_paired_first(
                concrete, analysis, parameters or self.parameters, budget
            )
        except NothingFitsError as error:
            if self.safety_ratio < 1:
                error.args = (
                    f"{error} (the budget is safety_ratio {self.safety_ratio:g} of the device "
                    "memory left after the reserve; a larger safety_ratio, up to 1, plans closer "
                    "to the device memory and leaves less room for the simulator's error)",
                )
            if not keep_closest or error.closest is None:
                raise
            log.info("%s", error)
            tuned = error.closest
            self._shortfall = str(error)
        timings = {
            "trace_s": traced - started,
            "analysis_s": analysed - traced,
            "tune_s": time.perf_counter() - analysed,
        }
        if tuned.plan is not None:
            log_plan(analysis, tuned.plan)
        return concrete, analysis, tuned, timings, budget

    def _tune_paired_first(self, concrete, analysis, parameters, budget):
        """Tune with the reads oneDNN pairs kept direct (speed: `lms.cpu_paired_reads`); when
        nothing fits that way, tune again with them swappable (reach: their gradients then take
        TensorFlow's slower kernel). Returns (analysis, tuned) of the plan kept.

        Only then: a plan that merely misses the budget after the allocator's padding stays
        paired. GoogLeNet 224² b4 replanned with them swapped measured up to 1.02x its device
        memory, 11 % over the simulated peak, which fell in pool1's gradient (paired: 0.97x)."""
        try:
            return analysis, self._tune_or_apply(analysis, parameters, budget)
        except NothingFitsError:
            if not any(t.paired_with for t in analysis.tensors):
                raise
        log.info(
            "Nothing fits with the max pool outputs oneDNN pairs with their gradients kept on "
            "the device; planning again with them swappable"
        )
        unpaired = self._analyse(concrete, frozenset())
        return unpaired, self._tune_or_apply(unpaired, parameters, budget)

    def _analyse(self, concrete, paired_reads):
        analysis = analyze(
            concrete.graph,
            self.batch_size,
            host_device_marker="CPU" if _has_gpu() else None,
            paired_reads=paired_reads,
        )
        analysis.kernels = self._kernels()  # whose temporaries the simulator counts
        return analysis

    def _show_loop(self, calibration: Calibration | None) -> None:
        """Put the closed loop's attempts so far into the report (`report["calibration"]`)."""
        if calibration is not None and self.report is not None:
            self.report["calibration"] = calibration.as_dict()

    def _record(self, analysis, tuned, timings, planned=None, calibration=None) -> dict:
        self.report = build_report(analysis, tuned, self.budget, timings, planned)
        self._show_loop(calibration)
        if self.plot_path:
            from lms.plot import plot_simulation

            plot_simulation(tuned, self.budget, self.plot_path)
        return self.report

    def _prepare(
        self, function, args, parameters=None, budget=None, calibration=None, closest=False
    ):
        """Trace, analyse, tune for `budget` (default: the LMS's, or what the calibration cache
        holds for a step the loop has not measured yet), rewrite; a new attempt of the loop.
        Where the loop measures, the first plan (or, with `closest`, this one) is the closest
        one even when none fits in simulation: the measurement decides."""
        first = calibration is not None and not calibration.attempts
        # where the loop measures, a first plan the simulation says misses is run and measured
        # all the same (the simulation can be wrong both ways): a size does not fit only once
        # the loop has failed
        measured = (first or closest) and self._peak_meter() is not None
        self._shortfall = None
        concrete, analysis, tuned, timings, planned = self._analyse_and_tune(
            function, args, measured, parameters, budget, first
        )
        started = time.perf_counter()
        callable_ = concrete
        if tuned.plan is not None:
            callable_ = rewrite(concrete, analysis, tuned.plan, self._mechanism())
        timings["rewrite_s"] = time.perf_counter() - started
        if calibration is not None:
            calibration.begin(planned, tuned.simulation.peak_bytes, self._shortfall)
        self._record(analysis, tuned, timings, planned, calibration)
        return callable_, tuned

    def _tune_or_apply(self, analysis, parameters, budget):
        """Auto-tune for `budget` when any parameter is -1; parameters all given are applied as
        they are (TFLMSv2's behaviour), with a warning when their simulated peak misses it."""
        if parameters.needs_tuning:
            return tune(analysis, budget, parameters, self._allocator())
        allocator = self._allocator()
        baseline = simulate(analysis, None, allocator)
        if parameters.ordering == -1:  # TFLMSv2's parameters all given: TFLMSv2's free order
            parameters = parameters.resolved(ordering=0)
        given = plan(analysis, parameters)
        simulation = simulate(analysis, given, allocator)
        if simulation.peak_bytes > budget:
            log.warning(
                "The given LMS parameters give a simulated peak of %.3f GiB, above the budget "
                "of %.3f GiB",
                simulation.peak_bytes / 2**30,
                budget / 2**30,
            )
        return Tuned(parameters, given, simulation, baseline, 2)

    def plan_only(self, function, *specs) -> dict:
        """Trace, analyse and tune for `specs` without rewriting or running: the report. When
        nothing fits, the report has `fits: false` and the parameters that came closest."""
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        _, analysis, tuned, timings, planned = self._analyse_and_tune(
            function, specs, True, cached=True
        )
        report = self._record(analysis, tuned, timings, planned)
        if planned != self.budget and self.cache is not None:  # from the calibration cache
            report["calibration"] = self.cache.entry(self._fingerprint)
        return report

    # As a Keras callback: model.fit(..., callbacks=[LMS(...)]) trains with the rewritten step.
    def on_train_begin(self, logs=None):
        model = self.model
        step = self.wrap(tf.function(model.train_step))

        def train_function(iterator):
            """One step per call (steps_per_execution is not combined with LMS)."""
            if isinstance(iterator, tf.data.Iterator | tf.distribute.DistributedIterator):
                optional = iterator.get_next_as_optional()
                if not optional.has_value():
                    raise StopIteration
                data = optional.get_value()
            else:
                data = next(iter(iterator))
            return step(data)

        self._original_train_function = model.train_function
        model.train_function = train_function

    def on_train_end(self, logs=None):
        self.model.train_function = self._original_train_function


def loops_warning(loops) -> str:
    """One line naming the loop LMS cannot plan into: its body runs as one op, and the tensor
    lists it keeps for the gradient (lms/loops.py) cannot be swapped."""
    name, size = loops[0]
    others = f" ({len(loops)} loops, {format_size(sum(s for _, s in loops))} in all)"
    return (
        f"LMS cannot plan into the While loop '{name}': the {format_size(size)} its body keeps "
        f"for the gradient stay on the device{others if len(loops) > 1 else ''}; they are "
        "counted in the plan's peak, not swapped"
    )


def build_report(analysis, tuned, budget, timings, planned=None) -> dict:
    """What a plan is: its budget (the measured peak's limit) and the budget it was planned for
    (lower after the closed loop's corrections), simulated peaks, swaps, the peak explained, the
    timeline; `calibration` (added by LMSFunction) says what the loop measured."""
    plan = tuned.plan
    planned = budget if planned is None else planned
    return {
        "budget_bytes": budget,
        "planned_budget_bytes": planned,
        "fits": tuned.simulation.peak_bytes <= planned,
        "lms_needed": plan is not None,
        "parameters": tuned.parameters.as_dict(),
        "peak_bytes_without_lms": tuned.baseline.peak_bytes,
        "peak_op_without_lms": tuned.baseline.peak_op,
        "peak_bytes_with_lms": tuned.simulation.peak_bytes,
        "peak_op_with_lms": tuned.simulation.peak_op,
        "host_peak_bytes": int(tuned.simulation.host.max()) if tuned.simulation.steps else 0,
        "swapped_tensors": plan.swap_count if plan else 0,
        "swap_ins": plan.swap_in_count if plan else 0,
        "swapped_bytes": plan.swapped_bytes(analysis) if plan else 0,
        "swapped_in_bytes": plan.swapped_in_bytes(analysis) if plan else 0,
        "simulations": tuned.simulations,
        # what holds memory at the (planned) peak and why it was not swapped
        "peak": explain_peak(analysis, tuned.simulation, plan),
        # the op that sets the swap-only floor, with its kernel's temporary
        "analysis": {**analysis.summary(), "floor_op": largest_footprint(analysis).as_dict()},
        "timings_s": timings,
        # the simulated memory over the step, max-pooled to at most TIMELINE_POINTS points (peaks
        # kept): enough for a report's plot, small enough for a record
        "timeline": {
            "device_bytes_without_lms": _pooled(tuned.baseline.device),
            "device_bytes_with_lms": _pooled(tuned.simulation.device) if plan else None,
            "host_bytes": _pooled(tuned.simulation.host) if plan else None,
        },
    }


TIMELINE_POINTS = 300


def _pooled(values) -> list[int]:
    values = list(values)
    if len(values) <= TIMELINE_POINTS:
        return [int(v) for v in values]
    size = -(-len(values) // TIMELINE_POINTS)
    return [int(max(values[i : i + size])) for i in range(0, len(values), size)]


def _retraced(function):
    """A new tf.function of the same Python function: the rewrite edits a trace in place, so a
    new plan needs a fresh one."""
    return tf.function(function.python_function, input_signature=function.input_signature)
