"""`LMS`: enable Large Model Support in one line, on a training step or as a Keras callback.

    step = lms.LMS(device_memory="16GiB").wrap(train_step)   # a tf.function training step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # or as a Keras callback

`LMS` holds the options (`lms.Options`), the budget and the device, and makes plans (trace,
analyse, tune, rewrite); `LMSFunction` (lms/function.py) runs the wrapped step and its closed
loop; the report is an `lms.PlanReport` (lms/values/report.py).
"""

import functools
import logging
import time

import keras
import tensorflow as tf

from lms import _tf_private
from lms.calibration import Calibration, CalibrationCache, PeakMeter, fingerprint
from lms.device.host_memory import check_host_memory
from lms.device.rewriter import keep_from_grappler, rewrite
from lms.device.swap import DeviceCopy, HostStore
from lms.device.target import resolve_target
from lms.errors import NothingFitsError, ParameterError
from lms.function import LMSFunction
from lms.graph.cpu_host import EIGEN_KERNELS_WARNING
from lms.graph.names import REWRITTEN_MARK
from lms.memory.allocator import BestFitAllocator, cpu_allocator_limit
from lms.memory.simulator import simulate
from lms.plan_report import build_report
from lms.planning.planner import log_plan, plan
from lms.split.fit import forced_splits, split_to_fit
from lms.split.ops import DevicePieces, HostPieces, running_ops
from lms.tuning.analysis import analyze, cpu_paired_reads
from lms.tuning.tuner import Tuned, tune
from lms.values.budget import budget_bytes, format_size
from lms.values.options import Options
from lms.values.parameters import Parameters
from lms.values.report import PlanReport

log = logging.getLogger("lms")


class LMS(keras.callbacks.Callback):
    """Large Model Support for a TensorFlow 2 training step.

    Takes `lms.Options`' fields as keyword arguments (`device_memory` also as the first
    argument), each with its default and meaning there; they are checked before any work and
    kept as `options`. `report` is the last plan's `lms.PlanReport`.
    """

    def __init__(self, device_memory=None, **options):
        super().__init__()
        self.options = options = Options(device_memory, **options)
        self.parameters = options.parameters
        self.calibration_steps = options.calibration_steps
        self.max_corrections = options.max_corrections
        cache = options.calibration_cache
        self.cache = CalibrationCache(cache) if cache else None
        self.link = options.link
        # the device, worked out once: mechanism, where compute and host copies live, the meter
        self.target = resolve_target(options.mechanism, options.device)
        device_bytes = options.device_bytes
        if device_bytes is None:  # the step's own GPU: TensorFlow's memory pool for it
            device_bytes = self.target.pool_bytes() if self.target.kind == "gpu" else None
            if device_bytes is None:
                raise ParameterError(
                    "device_memory is required without a readable GPU (on the emulated device it "
                    "is the memory budget), e.g. LMS(device_memory='2GiB')"
                )
        self.budget = budget_bytes(device_bytes, options.reserve, options.safety_ratio)
        # the reserve taken off
        self.device_limit = budget_bytes(device_bytes, options.reserve, 1.0)
        self.safety_ratio = options.safety_ratio
        self.allocator_name = options.allocator
        self.device_bytes = device_bytes
        self.batch_size, self.plot_path = options.batch_size, options.plot
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
        if not self.target.on_cpu:
            return functools.partial(BestFitAllocator, self.device_bytes, self.target.growth())
        return functools.partial(BestFitAllocator, cpu_allocator_limit(), True)

    def _device_key(self) -> str:
        """What besides the graph a calibration holds for: device, memory, kernels, versions."""
        target = self.target
        return (
            f"{target.kind}:{target.compute_device}|{self.device_bytes}|{self.budget}|"
            f"{target.kernels()}|tf{tf.__version__}|{self.parameters}|{self.allocator_name}"
        )

    def _peak_meter(self) -> PeakMeter | None:
        """The device's allocator statistics for the closed loop, or None: the loop is off, or
        TensorFlow keeps no statistics for the device (then plans are only simulated)."""
        if not self.calibration_steps or self.target.meter_device is None:
            return None  # (two-device: both devices share the CPU's allocator)
        if self._meter is None:
            self._meter = PeakMeter(self.target.meter_device)
            if not self._meter.available:
                how = (
                    "on the emulated device set TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow "
                    "starts"
                    if self.target.emulated
                    else "TensorFlow sees no such GPU"
                )
                log.warning(
                    "LMS cannot measure the step's peak on %s (%s): its plans are checked in "
                    "simulation only",
                    self._meter.device,
                    how,
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
        target = self.target
        if target.device_copies:
            if self.link is not None:
                raise ParameterError(
                    "link emulates a link on the emulated device; this LMS copies through "
                    f"TensorFlow's own copies ({target.kind})"
                )
            return DeviceCopy(target.host_device, target.compute_device)
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
        on_cpu = self.target.on_cpu  # the emulated and the two-device mode compute there
        if on_cpu and not _tf_private.onednn_enabled():
            log.warning(EIGEN_KERNELS_WARNING)
        paired = cpu_paired_reads() if on_cpu else frozenset()
        self._splits, self._piece_io = [], self._pieces()  # one per graph: it tracks the pieces
        if isinstance(self.options.split, dict):  # asked for: split before anything is planned
            self._splits = forced_splits(concrete.graph, self.options.split, self._piece_io)
        analysis = self._analyse(concrete, paired)
        if analysis.loops:
            log.warning(loops_warning(analysis.loops))
        analysed = time.perf_counter()
        try:
            analysis, tuned = self._tune_or_split(
                concrete, analysis, parameters or self.parameters, budget
            )
        except NothingFitsError as error:
            analysis = getattr(error, "analysis", analysis)
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

    def _tune_or_split(self, concrete, analysis, parameters, budget):
        """Tune; when nothing fits, or only the bytes asked and not the allocator's chunks, and
        `split` is "auto", split ops into pieces in rounds and tune again after each
        (lms/split/fit.py). Returns (analysis, tuned)."""
        try:
            analysis, tuned = self._tune_paired_first(concrete, analysis, parameters, budget)
        except NothingFitsError as error:
            if self.options.split != "auto":
                raise
            failed, unsplit = error, None
        else:
            fits = tuned.simulation.peak_bytes <= budget
            if fits or self.options.split != "auto" or not parameters.needs_tuning:
                return analysis, tuned  # (parameters given are applied as given)
            # its bytes asked fit, not with the allocator's padding (tune kept the closest):
            # splitting may fit; if it does not, this plan stays the closest
            failed, unsplit = NothingFitsError("only with the allocator's padding over"), tuned
            failed.closest = tuned

        # "without LMS" stays the step as traced, not as split
        plain = failed.closest.baseline if failed.closest is not None else None

        def analyse():  # unpaired: splitting comes after the paired reads were given up
            return self._analyse(concrete, frozenset())

        def tune(split_analysis):
            self._paired_analysis = split_analysis
            try:
                tuned = self._tune_or_apply(split_analysis, parameters, budget)
            except NothingFitsError as error:
                if error.closest is not None and plain is not None:
                    error.closest.baseline = plain
                raise
            tuned.baseline = plain or tuned.baseline
            return tuned

        try:
            _, tuned, splits = split_to_fit(
                concrete.graph, analysis, budget, failed, self._piece_io, analyse, tune
            )
        except NothingFitsError as error:
            made = getattr(error, "splits", [])
            self._splits += made
            if unsplit is not None and not made:  # the graph is as traced: tune's plan stands
                return analysis, unsplit
            if unsplit is not None and error.closest is not None:  # the graph is split now
                return error.analysis, error.closest
            raise
        self._splits += splits
        return self._paired_analysis, tuned

    def _pieces(self):
        """How a split op's pieces reach the host: TensorFlow's copies (a GPU, two-device),
        else the host store."""
        target = self.target
        if target.device_copies:
            return DevicePieces(target.host_device, target.compute_device)
        if self.store is None:
            self.store = HostStore(self.link)
        return HostPieces(self.store)

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
            host_device_marker=self.target.host_marker,
            paired_reads=paired_reads,
        )
        analysis.kernels = self.target.kernels()  # whose temporaries the simulator counts
        return analysis

    def _show_loop(self, calibration: Calibration | None) -> None:
        """Put the closed loop's attempts so far into the report (`report.calibration`)."""
        if calibration is not None and self.report is not None:
            self.report = self.report.with_calibration(calibration.as_dict())

    def _record(self, analysis, tuned, timings, planned=None, calibration=None) -> PlanReport:
        splits = getattr(self, "_splits", ())
        self.report = build_report(analysis, tuned, self.budget, timings, planned, splits)
        self._show_loop(calibration)
        if self.plot_path:
            from lms.memory.plot import plot_simulation

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
        target = self.target
        simulation = tuned.simulation
        check_host_memory(
            simulation.host_peak_bytes,
            simulation.peak_bytes,
            target.emulated,  # the emulated device's buffers are host memory too
            self.options.host_memory,
            pinned=target.pinned_host_bytes(),
        )
        started = time.perf_counter()
        if self._splits and self._piece_io.keeps_ops:  # TensorFlow's copies: kept from Grappler
            running = running_ops(concrete.graph)
            keep_from_grappler(concrete.graph, [op for op in self._piece_io.made if op in running])
        callable_ = concrete
        if tuned.plan is not None:
            callable_ = rewrite(concrete, analysis, tuned.plan, self._mechanism())
        elif self._splits:  # split but nothing swapped: the edited graph still needs a callable
            callable_ = _tf_private.concrete_function_from_graph(concrete, concrete.graph)
            setattr(concrete.graph, REWRITTEN_MARK, True)
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

    def plan_only(self, function, *specs) -> PlanReport:
        """Trace, analyse and tune for `specs` without rewriting or running: the report. When
        nothing fits, the report has `fits` False and the parameters that came closest."""
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        _, analysis, tuned, timings, planned = self._analyse_and_tune(
            function, specs, True, cached=True
        )
        report = self._record(analysis, tuned, timings, planned)
        if planned != self.budget and self.cache is not None:  # from the calibration cache
            report = self.report = report.with_calibration(self.cache.entry(self._fingerprint))
        return report

    # As a Keras callback: model.fit(..., callbacks=[LMS(...)]) trains with the rewritten step.
    def on_train_begin(self, logs=None):
        model = self.model
        if getattr(model, "jit_compile", False):  # Keras 3's "auto" turns it on for GPUs
            log.info(
                "LMS runs model.fit's step without XLA (jit_compile): XLA compiles the step as "
                "one cluster, which cannot hold host-placed swap ops"
            )
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
    lists it keeps for the gradient (lms/graph/loops.py) cannot be swapped."""
    name, size = loops[0]
    others = f" ({len(loops)} loops, {format_size(sum(s for _, s in loops))} in all)"
    return (
        f"LMS cannot plan into the While loop '{name}': the {format_size(size)} its body keeps "
        f"for the gradient stay on the device{others if len(loops) > 1 else ''}; they are "
        "counted in the plan's peak, not swapped"
    )
