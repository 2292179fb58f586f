"""Plan-making as one pipeline, from a training step to a plan that runs: trace, analyse, tune
(splitting ops when swapping alone does not fit), check the host's memory, rewrite.

`LMS` (lms/api.py) holds one `Pipeline`; the closed loop (lms/closed_loop.py) asks it for plans
at the budgets it measures its way to. Each step of the way returns one frozen result that says
what it is: `plan` a `Planned` (the trace, its analysis, the tuned plan, the splits, what it was
planned for), `prepare` a `Prepared` (the callable that runs the plan, and its report). The device
is worked out once, when the pipeline is made (`lms.device.target.Device`), and so is the
mechanism that moves bytes on it (`lms.device.mechanism`).
"""

import functools
import logging
import time
from dataclasses import replace

import tensorflow as tf

from lms import _tf_private
from lms.calibration import Calibration, CalibrationCache, fingerprint
from lms.device.host_memory import check_host_memory
from lms.device.mechanism import mechanism_for
from lms.device.rewriter import one_iteration_at_a_time, rewrite
from lms.device.target import describe_device
from lms.errors import NothingFitsError
from lms.graph.cpu_host import EIGEN_KERNELS_WARNING
from lms.graph.names import REWRITTEN_MARK, SPLITS_MADE, STREAMED_LISTS
from lms.graph.pool_reads import recompute_pool_reads
from lms.loop_lists import loops_warning, stream_loop_lists
from lms.memory.allocator import BestFitAllocator, cpu_allocator_limit
from lms.memory.simulator import simulate
from lms.plan_report import build_report
from lms.plan_request import Planned, Prepared, Request
from lms.planning.planner import log_plan, plan
from lms.split.fit import chain_to_fit, forced_splits, split_in_rounds
from lms.split.worth import unless_past_swapping
from lms.tuning.analysis import analyze, cpu_paired_reads
from lms.tuning.prune import prune
from lms.tuning.tuner import Tuned, tune
from lms.values.budget import format_size
from lms.values.options import Options
from lms.values.parameters import Parameters
from lms.values.report import PlanReport

log = logging.getLogger("lms")


class Pipeline:
    """Plans for one device and one set of options (`lms.Options`)."""

    def __init__(self, options: Options):
        self.options = options
        self.device = describe_device(options)
        self.mechanism = mechanism_for(self.device.target, options.link, options.host_disk)
        path = options.calibration_cache
        self.cache = CalibrationCache(path) if path else None

    def plan(self, function, args, request: Request = Request()) -> Planned:
        """Trace `function` for `args` (tensors or TensorSpecs), analyse, tune for the budget
        asked (splitting where the options allow and nothing fits by swapping). Raises
        NothingFitsError unless `request.keep_closest` and a closest plan exists."""
        started = time.perf_counter()
        concrete = _trace(function, args)
        traced = time.perf_counter()
        parameters, budget = request.parameters, request.budget_bytes
        key, pruned_for = None, None
        if self.cache is not None:
            key = fingerprint(
                concrete.graph, self.device.key(self.options.parameters, self.options.allocator)
            )
            entry = self.cache.entry(key) if request.cached and budget is None else None
            if entry is not None:  # the plan that held last time: its budget and parameters
                budget = entry["budget_bytes"]
                if entry.get("parameters"):
                    parameters = Parameters(**entry["parameters"])
                    pruned_for = entry.get("pruned_for_bytes")
                if entry.get("streamed_lists"):  # its plan streamed the loops' largest lists
                    streams = self.mechanism.swaps, concrete, self.options.batch_size
                    stream_loop_lists(*streams, count=entry["streamed_lists"])
                log.info(
                    "LMS: planning for %s with the parameters that held last time (calibration "
                    "cache %s)",
                    format_size(budget),
                    self.cache.path,
                )
        budget = budget or self.device.budget_bytes
        parameters = parameters or self.options.parameters
        target = self.device.target
        if self.device.kernels == "eigen":  # (the kernels, worked out once with the device)
            log.warning(EIGEN_KERNELS_WARNING)
        pieces = self.mechanism.pieces()  # one per graph: it tracks the graph's pieces
        splits = []
        if isinstance(self.options.split, dict):  # asked for: split before anything is planned
            chained = self.options.split_chains
            splits = forced_splits(concrete.graph, self.options.split, pieces, chained)
        paired = cpu_paired_reads() if target.on_cpu else frozenset()
        analysis = self._analyse(concrete, paired)
        if analysis.loops:
            swappable = sum(t.bytes for t in analysis.tensors if t.list_element and t.swappable)
            log.warning(loops_warning(analysis.loops, swappable))
        analysed = time.perf_counter()
        shortfall = None
        tuning = (concrete, analysis, parameters, budget, pieces, pruned_for, request.made)
        try:
            analysis, tuned, made = self._tune_or_split(*tuning)
        except NothingFitsError as error:
            splits += error.splits
            analysis = error.analysis or analysis
            if self.options.safety_ratio < 1:
                error.args = (
                    f"{error} (the budget is safety_ratio {self.options.safety_ratio:g} of the "
                    "device memory left after the reserve; a larger safety_ratio, up to 1, plans "
                    "closer to the device memory and leaves less room for the simulator's error)",
                )
            if not request.keep_closest or error.closest is None:
                raise
            log.info("%s", error)
            tuned, shortfall, made = error.closest, str(error), error.splits
        else:
            splits += made
        chained = self._chain(function, args, made, analysis, tuned, parameters, budget)
        if chained is not None:  # (a closest plan, kept for the closed loop, is chained too)
            concrete, analysis, tuned, splits, failure, pieces = chained
            shortfall = None if failure is None else str(failure)
        spans = (traced - started, analysed - traced, time.perf_counter() - analysed)
        timings = dict(zip(("trace_s", "analysis_s", "tune_s"), spans, strict=True))
        if tuned.plan is not None:
            log_plan(analysis, tuned.plan)
        found = (concrete, analysis, tuned, tuple(splits), pieces, budget, shortfall, timings)
        return Planned(*found, key)

    def prepare(self, function, args, request: Request = Request()) -> Prepared:
        """`plan`, then check the host's memory for it and rewrite the step: what runs."""
        planned = self.plan(function, args, replace(request, made=True))
        simulation, target = planned.tuned.simulation, self.device.target
        ram = check_host_memory(
            simulation.host_peak_bytes,
            simulation.peak_bytes,
            target.emulated,  # the emulated device's buffers are host memory too
            self.options.host_memory,
            pinned=self.device.pinned_host_bytes,
            disk=self.options.host_disk,
        )
        if self.mechanism.store is not None:  # with a disk: the RAM its arrays may fill
            self.mechanism.store.arrays.allow(ram, simulation.host_peak_bytes)
        started, concrete = time.perf_counter(), planned.concrete
        if planned.splits:
            planned.pieces.finish(concrete.graph)  # TensorFlow's copies: kept from Grappler
        callable_ = concrete
        if planned.tuned.plan is not None:
            plan_ = planned.tuned.plan
            callable_ = rewrite(concrete, planned.analysis, plan_, self.mechanism.swaps)
        elif planned.splits or planned.analysis.loops:
            # split, or loops to run as simulated, nothing swapped: the edited graph's callable
            graph = concrete.graph
            one_iteration_at_a_time(planned.analysis, graph.get_operations())
            callable_ = _tf_private.concrete_function_from_graph(concrete, graph)
            setattr(graph, REWRITTEN_MARK, True)
        timings = {**planned.timings, "rewrite_s": time.perf_counter() - started}
        planned = replace(planned, timings=timings)
        return Prepared(callable_, planned, self.report(planned))

    def report(self, planned: Planned) -> PlanReport:
        """The `lms.PlanReport` of `planned` (planned for a budget from the calibration cache:
        with the cache's entry as its calibration); with the `plot` option, its PNG too."""
        budget = self.device.budget_bytes
        report = build_report(
            planned.analysis,
            planned.tuned,
            budget,
            planned.timings,
            planned.budget_bytes,
            planned.splits,
        )
        if planned.budget_bytes != budget and self.cache is not None and planned.fingerprint:
            report = report.with_calibration(self.cache.entry(planned.fingerprint))
        if self.options.plot:
            from lms.memory.plot import plot_simulation

            plot_simulation(planned.tuned, budget, self.options.plot)
        return report

    def remember(self, planned: Planned, calibration: Calibration) -> None:
        """A plan held after the closed loop corrected it: keep its budget and parameters in
        the calibration cache, for the next process that plans this step."""
        if self.cache is not None and calibration.corrections and planned.fingerprint:
            parameters = planned.tuned.parameters.as_dict()
            pruned_for = planned.tuned.pruned_for
            streamed = getattr(planned.concrete.graph, STREAMED_LISTS, 0)
            self.cache.store(planned.fingerprint, calibration, parameters, pruned_for, streamed)

    def new_calibration(self) -> Calibration:
        """The closed loop's bookkeeping for one input signature."""
        options = self.options
        return Calibration(
            self.device.budget_bytes,
            self.device.limit_bytes,
            options.calibration_steps,
            options.max_corrections,
        )

    # the steps of `plan`
    def _analyse(self, concrete, paired_reads):
        analysis = analyze(
            concrete.graph,
            self.options.batch_size,
            host_device_marker=self.device.target.host_marker,
            paired_reads=paired_reads,
            kernels=self.device.kernels,  # whose temporaries the simulator counts
        )
        analysis.stacked_lists = not self.mechanism.swaps.copies_lists
        return analysis

    def allocator_model(self):
        """A factory of the allocator model plans are checked with, or None (bytes asked only).
        A GPU's holds all its memory in one region unless memory growth is on (off by default).
        The emulated device's is the CPU's, whose regions double up to its own limit, past the
        budget (GoogLeNet 1216² b2, all swapped, 640 MiB: 693 MiB modelled with regions capped
        at the budget, 623 with the CPU's limit, 610-625 measured)."""
        if self.options.allocator is None:
            return None
        if not self.device.target.on_cpu:
            return functools.partial(BestFitAllocator, self.device.device_bytes, self.device.growth)
        return functools.partial(BestFitAllocator, cpu_allocator_limit(), True)

    def _tune_or_split(self, concrete, analysis, parameters, budget, pieces, pruned_for, made):
        """Tune; when nothing fits, or only the bytes asked and not the allocator's chunks, and
        `split` is "auto", split ops into pieces in rounds decided on a model of them, made once
        (lms/split/fit.py `split_in_rounds`; with `made` False, a plan that fits as modelled is
        not made). Returns (analysis, tuned, splits); a NothingFitsError raised carries the
        splits made and the analysis of the graph as split."""
        try:
            if self.options.split == "auto" and parameters.needs_tuning and not analysis.loops:
                recomputed = lambda: self._recomputing_pools(concrete)()  # noqa: E731 (lazy)
                analysis = unless_past_swapping(analysis, budget, recomputed)
            analysis, tuned = self._tune_swaps(concrete, analysis, parameters, budget, pruned_for)
        except NothingFitsError as error:
            if self.options.split != "auto":
                raise
            failed, unsplit = error, None
            analysis = error.analysis or analysis  # streamed, if the lists were
        else:
            fits = tuned.simulation.peak_bytes <= budget
            if fits or self.options.split != "auto" or not parameters.needs_tuning:
                return analysis, tuned, []  # (parameters given are applied as given)
            # its bytes asked fit, not with the allocator's padding (tune kept the closest):
            # splitting may fit; if it does not, this plan stays the closest
            failed = NothingFitsError("only with the allocator's padding over", tuned)
            unsplit = tuned

        closest = failed.closest  # "without LMS" stays the step as traced, not as split
        plain = simulate(analysis) if closest is None else closest.baseline  # (as the tuner's)

        analyse = self._recomputing_pools(concrete)  # (the pools' outputs kept were given up)

        def tune_split(split_analysis):
            try:
                tuned = self._tune_or_apply(split_analysis, parameters, budget, pruned_for)
            except NothingFitsError as error:
                if error.closest is not None and plain is not None:
                    error.closest.baseline = plain
                raise
            tuned.baseline = plain or tuned.baseline
            return tuned

        try:
            found = split_in_rounds(
                *(concrete.graph, analysis, budget, failed, pieces, analyse, tune_split),
                self.options.split_chains and not analysis.loops,
                made,
            )
        except NothingFitsError as error:
            if unsplit is not None and not error.splits:  # the graph is as traced: tune's plan
                return analysis, unsplit, []
            if unsplit is not None and error.closest is not None:  # the graph is split now
                return error.analysis, error.closest, error.splits
            error.analysis = error.analysis or analysis  # (the lists' streaming is an edit too)
            raise
        return found

    def _chain(self, function, args, made, analysis, tuned, parameters, budget):
        """`chain_to_fit` (lms/split/fit.py) on a fresh trace, with side ops (without, if they
        made it worse): (concrete, *its result, pieces), or None (the unchained plan stays)."""
        # made as run (lms/split/fit.py), or a modelled plan, reported as it is (`Request.made`)
        as_run = getattr(analysis.graph, SPLITS_MADE, False) or analysis.modelled
        if not made or not self.options.split_chains or analysis.loops or as_run:
            return None
        tune = functools.partial(self._tune_or_apply, parameters=parameters, budget=budget)
        for sides in (True, False):
            concrete = _retrace(function, args)
            pieces, analyse = self.mechanism.pieces(), self._recomputing_pools(concrete)
            found = chain_to_fit(concrete.graph, made, pieces, analyse, tune, budget, tuned, sides)
            if found != "sides":
                return None if found is None else (concrete, *found, pieces)

    def _tune_swaps(self, concrete, analysis, parameters, budget, pruned_for=None):
        """Tune (`_tune_paired_first`); when no plan fits, or only the bytes asked, stream the
        loops' lists (lms/loop_lists.py: a py_func call per iteration each way), before any
        split, in rounds: each streams the largest lists left that cover the closest plan's
        excess and at least the bytes streamed before (the excess can move to another loop's
        gradient), until a plan fits or no list is left. Returns (analysis, tuned) kept."""
        if not parameters.needs_tuning:  # parameters given are applied as given
            return self._tune_paired_first(concrete, analysis, parameters, budget, pruned_for)
        plain, streamed_bytes = None, 0
        paired = cpu_paired_reads() if self.device.target.on_cpu else frozenset()
        while True:
            failure = None
            try:
                analysis, tuned = self._tune_paired_first(
                    concrete, analysis, parameters, budget, pruned_for
                )
            except NothingFitsError as error:
                failure, tuned = error, error.closest
            if failure is None and tuned.simulation.peak_bytes <= budget:
                break
            excess = tuned.simulation.peak_bytes - budget if tuned is not None else None
            needed = max(excess, streamed_bytes) if excess is not None else None
            lists = stream_loop_lists(
                self.mechanism.swaps, concrete, self.options.batch_size, needed
            )
            if not lists:
                if failure is None:
                    break
                if streamed_bytes:
                    if failure.closest is not None:
                        failure.closest.baseline = plain
                    # the closest plan is the streamed graph's (its analysis has the streaming ops)
                    failure.analysis = failure.analysis or analysis
                raise failure
            if plain is None:  # "without LMS" stays the step as traced, not as streamed
                plain = simulate(analysis, None, self.allocator_model())
            streamed_bytes += sum(s.bytes for s in lists)
            analysis = self._analyse(concrete, paired)
        if streamed_bytes:
            tuned.baseline = plain
        return analysis, tuned

    def _tune_paired_first(self, concrete, analysis, parameters, budget, pruned_for=None):
        """Tune with the reads oneDNN pairs kept direct (`lms.internal.cpu_paired_reads`); when
        nothing fits so, with each max pool gradient reading its pool recomputed
        (`_recomputing_pools`). Returns (analysis, tuned) of the plan kept. A plan that merely
        misses the budget after the allocator's padding stays paired (GoogLeNet 224² b4
        replanned with those outputs swapped measured up to 1.02x its device memory; 0.97x)."""
        try:
            return analysis, self._tune_or_apply(analysis, parameters, budget, pruned_for)
        except NothingFitsError:
            if not any(t.paired_with for t in analysis.tensors):
                raise
        log.info(
            "Nothing fits with the max pool outputs oneDNN pairs with their gradients kept "
            "on the device; planning again with each gradient reading its pool recomputed"
        )
        recomputed = self._recomputing_pools(concrete)()
        return recomputed, self._tune_or_apply(recomputed, parameters, budget, pruned_for)

    def _recomputing_pools(self, concrete):
        """`analyse()` of `concrete` once its max pool gradients read their pools recomputed
        where oneDNN pairs them (lms/graph/pool_reads.py): the fast kernel, no bytes moved."""
        paired = cpu_paired_reads() if self.device.target.on_cpu else frozenset()
        if paired:
            recompute_pool_reads(concrete.graph)
        return functools.partial(self._analyse, concrete, paired)

    def _tune_or_apply(self, analysis, parameters, budget, pruned_for=None):
        """Auto-tune for `budget` when any parameter is -1; parameters all given are applied as
        they are (TFLMSv2's behaviour), with a warning when their simulated peak misses it.
        `pruned_for`: they are the calibration cache's, whose plan dropped the swaps this budget
        did not need when it held: it drops them again (lms/tuning/prune.py)."""
        allocator = self.allocator_model()
        if parameters.needs_tuning:
            return tune(analysis, budget, parameters, allocator, self.mechanism.transfer_cost)
        baseline = simulate(analysis, None, allocator)
        if parameters.ordering == -1:  # TFLMSv2's parameters all given: TFLMSv2's free order
            parameters = parameters.resolved(ordering=0)
        given = plan(analysis, parameters)
        dropped = 0
        if pruned_for is not None:
            cost = self.mechanism.transfer_cost
            pruned = prune(analysis, given, simulate(analysis, given), pruned_for, cost)
            given, dropped = pruned.plan, pruned.dropped
        simulation = simulate(analysis, given, allocator)
        if simulation.peak_bytes > budget:
            log.warning(
                "The given LMS parameters give a simulated peak of %.3f GiB, above the budget "
                "of %.3f GiB",
                *(simulation.peak_bytes / 2**30, budget / 2**30),
            )
        return Tuned(parameters, given, simulation, baseline, 2, dropped, pruned_for)


def _trace(function, args):
    """The concrete function of `function` for `args`. A trace another LMS object rewrote in
    place (one step wrapped twice, e.g. at two budgets) is not planned on top of: traced afresh."""
    concrete = function.get_concrete_function(*args)
    return _retrace(function, args) if getattr(concrete.graph, REWRITTEN_MARK, False) else concrete


def _retrace(function, args):
    """A fresh trace of `function` for `args`: a graph of its own, not the one it caches."""
    return tf.function(function.python_function).get_concrete_function(*args)
