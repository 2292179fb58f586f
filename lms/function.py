"""`LMSFunction`: a training step with LMS, and the closed loop that checks its plans.

On the first call for a given input signature the step is traced, analysed, its parameters tuned
against the memory budget, and its graph rewritten with swaps; later calls run the rewritten step.
While a plan is new its measured device peak corrects it (lms/calibration.py).
"""

import logging
from contextlib import nullcontext
from typing import TYPE_CHECKING

import tensorflow as tf

from lms import _tf_private
from lms.calibration import Calibration
from lms.device.host_memory import pinned_hint
from lms.device.swap import Traffic
from lms.device.target import is_host_out_of_memory
from lms.errors import HostMemoryError, LMSError, NothingFitsError, ParameterError
from lms.timing.steptime import SwapGraph
from lms.tuning.tuner import floor_parameters
from lms.values.budget import format_size
from lms.values.report import PlanReport, SwapTraffic

# a plan simulated at this many times the device memory is not run to be measured: no plan here
# measured under 0.9x its simulation (benchmarks/README.md: lms_split_measured.py,
# cpu_kernels_peak.py), and what the program holds outside the step only adds to it. (The closed
# loop's plan that swaps the most, when a split step's corrections found nothing: ResNet50 2432²
# b1 in 400 MiB simulated it at 1.48 GiB, and a search's trial spent minutes measuring 1.56.)
UNRUN_RATIO = 1.5

if TYPE_CHECKING:
    from lms.api import LMS

log = logging.getLogger("lms")


def _ordered(tuned) -> bool:
    return tuned is not None and tuned.plan is not None and tuned.plan.order is not None


class LMSFunction:
    """A training step with LMS: call it like the tf.function it wraps."""

    def __init__(self, lms: "LMS", function):
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        if _tf_private.jit_compiled(function):
            raise ParameterError(
                "LMS cannot rewrite a step compiled with XLA (tf.function(jit_compile=True)): "
                "XLA compiles the whole step as one cluster, which cannot hold host-placed swap "
                "ops; wrap the step without jit_compile"
            )
        self.lms, self.function = lms, function
        self._prepared = {}
        self._calibrations = {}  # input signature -> the closed loop's Calibration
        self._free_order = False  # TensorFlow refused an enforced order: plan in its own
        self._floor_measured = set()  # signatures whose plan that swaps the most was measured
        self._replanned = set()  # signatures whose best earlier plan was planned again
        self._warned_leftovers = False
        self._traffic, self._steps = Traffic(), 0
        # GPU: (the profiled callable, its copy events matched to swaps:
        # lms.observe.copy_events.SwapCopies)
        self._copies = None

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
            result = self._run(callable_, args)
        except tf.errors.ResourceExhaustedError as error:
            if store is not None:
                store.clear()
            if self.lms.target.device_copies and is_host_out_of_memory(error):
                raise HostMemoryError(
                    f"host memory: the step ran out of the host's memory for its copies "
                    f"({pinned_hint()}): {error.message.splitlines()[0]}"
                ) from None
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
        if key not in self._floor_measured:
            self._floor_measured.add(key)
            asked = self.lms.parameters
            floor = floor_parameters(asked.resolved(ordering=0) if self._free_order else asked)
            log.warning("LMS: %s; measuring the plan that swaps the most", why)
            self.function = _retraced(self.function)
            self._prepared[key] = self.lms._prepare(
                self.function,
                args,
                floor,
                budget=budget or calibration.current.budget_bytes,
                calibration=calibration,
            )
            simulated = self._prepared[key][1].simulation.peak_bytes
            if simulated <= UNRUN_RATIO * calibration.device_limit_bytes:
                return
            calibration.skip(
                f"simulated {format_size(simulated)}, over {UNRUN_RATIO:g}x the device memory: "
                "not run"
            )
            why = f"{why}; the plan that swaps the most was not run (its simulated peak is "
            why += f"{format_size(simulated)})"
        self._fall_back(key, args, calibration, why)

    def _fall_back(self, key, args, calibration: Calibration, why: str) -> None:
        """No correction is left or none fits: plan again the best earlier plan that fit the
        device memory (once), else keep the current plan if it fits, else NothingFitsError."""
        earlier = calibration.best_kept_earlier()
        if earlier is not None and key not in self._replanned:
            self._replanned.add(key)
            log.warning(
                "LMS: %s; planning again for %s, whose plan measured %s, under the device memory",
                why,
                format_size(earlier.budget_bytes),
                format_size(earlier.measured_peak_bytes),
            )
            asked = self.lms.parameters
            self.function = _retraced(self.function)
            self._prepared[key] = self.lms._prepare(
                self.function,
                args,
                asked.resolved(ordering=0) if self._free_order else asked,
                budget=earlier.budget_bytes,
                calibration=calibration,
            )
            return
        calibration.keep_or_fail(why)

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
        return self._run(self._prepared[key][0], args)

    def run_metadata(self, *args):
        """Run one more step of the current plan (after a first call) with TensorFlow's run
        metadata on, through a fresh instantiation of its graph (TensorFlow records a function's
        optimized and partition graphs when it instantiates it, i.e. on its first call with
        metadata on): the `RunMetadata` proto (lms/observe/placement.py reads it). The step
        trains."""
        callable_, _ = self.prepare(*args)
        fresh = _tf_private.concrete_function_from_graph(callable_, callable_.graph)
        with _tf_private.run_metadata() as found:
            self._run(fresh, args)
        return found[0]

    def _run(self, callable_, args):
        """Call the rewritten step with the Grappler settings LMS steps run with
        (`lms._tf_private.lms_step_config`) and, where the target names one, on its compute
        device (the two-device mode's /CPU:1: its ops are placed by the call's device)."""
        device = self.lms.target.compute_device
        with _tf_private.lms_call_options(), tf.device(device) if device else nullcontext():
            return callable_(*args)

    @property
    def report(self) -> PlanReport | None:
        """What the last preparation planned (see `LMS.report`)."""
        return self.lms.report

    def profile(self, *args):
        """Run one step under TensorFlow's profiler: (lms.StepProfile of its ops, lms.SwapGraph
        of its swaps), what `lms.project` replays on another link. Run a step first: the first
        call traces, plans and rewrites.

        With device copies (a GPU, the two-device mode) a swap's bytes move through the
        partitioner's send/recv pair, so one more step runs first with run metadata on
        (`run_metadata`, it trains too) to read the pairs' names (lms/observe/copy_match.py); the
        profile's events of those pairs are the swaps' transfers. On a GPU the same step's copy
        events matched to swaps are what `traffic()` reports."""
        from lms.observe.copy_events import swap_copies
        from lms.observe.copy_match import copy_names
        from lms.observe.xspace import profiled_space
        from lms.timing.profile import step_profile, swap_graph

        callable_, _ = self.prepare(*args)
        device_copies = self.lms.target.device_copies
        names = copy_names(self.run_metadata(*args)) if device_copies else {}
        space = profiled_space(self, *args)
        profile = step_profile(space, names)
        if device_copies and profile.copies:  # GPU only: the copies' own bytes and durations
            self._copies = (callable_, swap_copies(space, names))
        graph = getattr(callable_, "graph", None)
        swaps = swap_graph(graph, self.lms.batch_size) if graph is not None else SwapGraph({})
        return profile, swaps

    def reset_traffic(self) -> None:
        """Forget the swap traffic counted so far (e.g. after warm-up steps). A GPU's copy
        events of the last `profile()` stay: they are one step's, and hold for its plan."""
        if self.lms.store is not None:
            self.lms.store.take_traffic()
        self._traffic, self._steps = Traffic(), 0

    def traffic(self) -> SwapTraffic | None:
        """The swap traffic per step since the last `reset_traffic` (None before any step):
        swaps and bytes each way, beside the plan's (`planned_*`); seconds and bandwidth only
        where a copy's own duration was measured (`lms.SwapTraffic.copy`).

        - the emulated device: counted in the host store, timed by its emulated link if any;
        - device copies (a GPU) after `profile()` of the current plan: the profiled step's copy
          events matched to the swaps by their send/recv names (`source` "copy events"): what
          ran, which can differ from the plan (a swap TensorFlow's passes removed moves
          nothing; a copy no swap names, the input batch's, is in `other_copies`);
        - device copies otherwise: the plan's swaps, each once a step (`source` "plan"; `copy`
          "two devices" in the two-device mode, whose copies between two logical CPU devices
          leave no copy event)."""
        if not self._steps:
            return None
        steps, link = self._steps, self.lms.link
        report = self.lms.report
        planned = _planned_per_step(report)
        timed = {}  # direction -> (bytes, seconds) per step, of copies whose duration was measured
        others = None
        if self.lms.target.emulated:
            t, source = self._traffic, "host-store"
            counts = _per_step(t, steps)
            copy = "emulated link" if link is not None else "none"
            if link is not None:
                timed = {
                    "out": (t.out_bytes / steps, t.out_transfer_seconds / steps),
                    "in": (t.in_bytes / steps, t.in_transfer_seconds / steps),
                }
        else:
            copies = self._profiled_copies()
            if copies is None:  # two logical CPU devices record no copy events
                two_devices = self.lms.target.kind == "two-device"
                source, copy = "plan", "two devices" if two_devices else "not profiled"
                counts = tuple(n or 0 for n in planned)
            else:
                source, copy = "copy events", "GPU copy events"
                found = {d: copies.swaps.get(d, (0, 0, 0.0)) for d in ("out", "in")}
                counts = (found["out"][0], found["in"][0], found["out"][1], found["in"][1])
                timed = {d: found[d][1:] for d in ("out", "in") if found[d][0]}
                others = {
                    d: {"copies": n, "bytes": nbytes, "seconds": spent}
                    for d, (n, nbytes, spent) in copies.others.items()
                }
        seconds = {d: timed.get(d, (0, None))[1] for d in ("out", "in")}
        bandwidth = {d: timed[d][0] / seconds[d] if seconds[d] else None for d in ("out", "in")}
        return SwapTraffic(
            source=source,
            steps=steps,
            swap_outs_per_step=counts[0],
            swap_ins_per_step=counts[1],
            out_bytes_per_step=counts[2],
            in_bytes_per_step=counts[3],
            link=None if link is None else link.as_dict(),
            out_seconds_per_step=seconds["out"],
            out_bandwidth=bandwidth["out"],
            in_seconds_per_step=seconds["in"],
            in_bandwidth=bandwidth["in"],
            copy=copy,
            planned_swap_outs_per_step=planned[0],
            planned_swap_ins_per_step=planned[1],
            planned_out_bytes_per_step=planned[2],
            planned_in_bytes_per_step=planned[3],
            other_copies=others,
        )

    def _profiled_copies(self):
        """The copy events of the last `profile()` (lms.observe.copy_events.SwapCopies) if the plan
        it
        profiled is still the one that runs (a later plan's swaps are others); else None."""
        if not isinstance(self._copies, tuple):
            return None
        profiled, copies = self._copies
        current = any(callable_ is profiled for callable_, _ in self._prepared.values())
        return copies if current else None


def _per_step(traffic: Traffic, steps: int) -> tuple:
    """(swap-outs, swap-ins, bytes out, bytes in) per step of what the host store counted."""
    return (
        traffic.swap_outs / steps,
        traffic.swap_ins / steps,
        traffic.out_bytes / steps,
        traffic.in_bytes / steps,
    )


def _planned_per_step(report) -> tuple:
    """(swap-outs, swap-ins, bytes out, bytes in) the plan makes each step (a report of None or
    without them: Nones)."""
    if report is None:
        return (None, None, None, None)
    return (report.swapped_tensors, report.swap_ins, report.swapped_bytes, report.swapped_in_bytes)


def _retraced(function):
    """A new tf.function of the same Python function: the rewrite edits a trace in place, so a
    new plan needs a fresh one."""
    return tf.function(function.python_function, input_signature=function.input_signature)
