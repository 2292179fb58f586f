"""The closed loop as one small state machine: one input signature's plans, each measured while it
is new, until one holds (lms/calibration.py keeps the attempts and says when a plan overran).

Read top to bottom. A plan is made (`ClosedLoop.__init__`) and runs; while it is new, each step's
device peak is measured (`before_step`, `after_step`). A plan that measures under the budget over
`calibration_steps` steps is accepted. One that overruns, or runs out of device memory
(`out_of_memory`), is replaced by the next rung of a ladder, each rung tried once it is reached:

1. "lower": a plan for a budget lowered by the measured excess, while corrections are left and
   one fits in simulation;
2. "floor": the plan that swaps the most (the simulation ranks plans and can rank them wrongly),
   unless it is simulated at over `UNRUN_RATIO` times the device memory;
3. "earlier": the best earlier plan that measured under the device memory, planned again;
4. "done": the current plan is kept if it measured under the device memory, else
   NothingFitsError names every attempt.

TensorFlow may refuse an enforced op order (a graph pass fused ops across its edges):
`refused_order` plans again in TensorFlow's own order, and later plans keep to it.
Without a meter (no `calibration_steps`, or no allocator statistics) plans are only simulated.
"""

import logging

import tensorflow as tf

from lms.calibration import PeakMeter
from lms.errors import HostMemoryError, LMSError, NothingFitsError
from lms.pipeline import Pipeline, Prepared, Request
from lms.tuning.tuner import floor_parameters
from lms.values.budget import format_size
from lms.values.report import PlanReport

log = logging.getLogger("lms")

# a plan simulated at this many times the device memory is not run to be measured: no plan here
# measured under 0.9x its simulation (benchmarks/README.md: lms_split_measured.py,
# cpu_kernels_peak.py), and what the program holds outside the step only adds to it. (The closed
# loop's plan that swaps the most, when a split step's corrections found nothing: ResNet50 2432²
# b1 in 400 MiB simulated it at 1.48 GiB, and a search's trial spent minutes measuring 1.56.)
UNRUN_RATIO = 1.5


def peak_meter(pipeline: Pipeline) -> PeakMeter | None:
    """The device's allocator statistics for the closed loop, or None: the loop is off, or
    TensorFlow keeps no statistics for the device (then plans are only simulated)."""
    target = pipeline.device.target
    if not pipeline.options.calibration_steps or target.meter_device is None:
        return None  # (two-device: both devices share the CPU's allocator)
    meter = PeakMeter(target.meter_device)
    if not meter.available:
        how = (
            "on the emulated device set TF_CPU_ALLOCATOR_USE_BFC=true before TensorFlow starts"
            if target.emulated
            else "TensorFlow sees no such GPU"
        )
        log.warning(
            "LMS cannot measure the step's peak on %s (%s): its plans are checked in "
            "simulation only",
            meter.device,
            how,
        )
        return None
    return meter


class ClosedLoop:
    """One input signature's plans (module docstring). `prepared` is the plan that runs now."""

    def __init__(self, pipeline: Pipeline, function, args, meter: PeakMeter | None):
        self.pipeline, self.function, self.args = pipeline, function, args
        # the attempts, kept (and reported) wherever the loop is on, measured where a meter is
        steps = pipeline.options.calibration_steps
        self.calibration = pipeline.new_calibration() if steps else None
        self.meter = meter if steps else None
        self.rung = "lower"  # the ladder's next rung once a plan overruns
        self.free_order = False  # TensorFlow refused an enforced order: plan in its own
        self._peak_before = None  # an accepted plan's step: the meter's peak before it
        self.prepared = self._plan(retrace=False)

    @property
    def report(self) -> PlanReport:
        """The current plan's report, with the loop's attempts so far."""
        report = self.prepared.report
        if self.calibration is not None:
            report = report.with_calibration(self.calibration.as_dict())
        return report

    @property
    def calibrating(self) -> bool:
        """Whether the loop still measures this signature's plan (it has not held yet)."""
        return self.calibration is not None and not self.calibration.accepted

    @property
    def ordered(self) -> bool:
        plan = self.prepared.tuned.plan
        return plan is not None and plan.order is not None

    # a step
    def before_step(self) -> bool:
        """Whether the coming step is measured (a new plan's first run is not: it holds the
        function's one-time allocations); the meter is reset for it while the plan is new. An
        accepted plan's steps are watched without a reset (the caller's own peak statistics
        stay whole): the peak so far is noted, and only a step that raises it is observed."""
        calibration = self.calibration
        measured = self.meter is not None and not calibration.skip_measure()
        self._peak_before = None
        if measured and not calibration.accepted:
            self.meter.reset()
        elif measured:
            self._peak_before = self.meter.peak()
        return measured

    def after_step(self) -> None:
        """A measured step ran: accept the plan, or replace it when it overran. Once accepted, a
        step that set no new peak is not observed: the peak so far was set by something else
        the process ran (a plain step timed beside the LMS one measured 698 MiB against an
        accepted plan's 259 and failed it)."""
        calibration, accepted = self.calibration, self.calibration.accepted
        peak = self.meter.peak()
        if accepted and self._peak_before is not None and peak <= self._peak_before:
            return
        if calibration.observe(peak):
            self._next_plan()
        elif calibration.accepted and not accepted:
            self.pipeline.remember(self.prepared.planned, calibration)

    def out_of_memory(self) -> None:
        """The step failed for lack of device memory (GPU): replace the plan (the caller runs
        the step again; without a meter it lets the error stand)."""
        self.calibration.out_of_memory(self.meter.peak())
        self._next_plan()

    def refused_order(self, error) -> Prepared:
        """TensorFlow refused the enforced order before running anything: a graph pass fused two
        ops with chain or swap-in edges between them, which makes a cycle. With ordering -1,
        plan again in TensorFlow's own order and return it (the caller runs it); a user's
        explicit ordering=1 gets the error instead."""
        if self.pipeline.options.parameters.ordering == 1:
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
        self.free_order = True
        calibration = self.calibration
        budget = calibration.current.budget_bytes if calibration is not None else None
        if calibration is not None:
            calibration.attempts.pop()  # that plan never ran
        self._plan(budget=budget, closest=True)
        if calibration is not None:
            calibration.skip_measure()  # this run is the new plan's first
        return self.prepared

    # the ladder
    def _next_plan(self) -> None:
        """The plan overran: the ladder's next rung (module docstring). Parameters the user gave
        all of are applied as given (TFLMSv2's behaviour): the overrun is only reported."""
        calibration = self.calibration
        if not self.pipeline.options.parameters.needs_tuning:
            log.warning(
                "LMS: the given parameters' measured peak %s is over the budget %s; they are "
                "applied as given (let one be -1 to have them corrected)",
                format_size(calibration.current.measured_peak_bytes),
                format_size(calibration.limit_bytes),
            )
            calibration.accepted = True
            return
        budget = calibration.next_budget()
        if budget is not None:
            try:
                self._plan(budget=budget)
                return
            except NothingFitsError as error:  # the last plan's callable stays in place
                why = f"nothing fits {format_size(budget)} in simulation ({error.args[0]})"
        else:
            why = f"after {calibration.corrections} corrections"
        if self.rung == "lower":
            self.rung = "floor"
            log.warning("LMS: %s; measuring the plan that swaps the most", why)
            floor = floor_parameters(self._asked())
            try:
                self._plan(floor, budget=budget or calibration.current.budget_bytes)
            except HostMemoryError as error:  # (the 3D U-Net 144³ split: 15.0 of 8.4 GiB)
                why = f"{why}; the plan that swaps the most was not run ({error})"
            else:
                simulated = self.prepared.tuned.simulation.peak_bytes
                if simulated <= UNRUN_RATIO * calibration.device_limit_bytes:
                    return
                calibration.skip(
                    f"simulated {format_size(simulated)}, over {UNRUN_RATIO:g}x the device "
                    "memory: not run"
                )
                why = f"{why}; the plan that swaps the most was not run (its simulated peak "
                why += f"is {format_size(simulated)})"
        earlier = calibration.best_kept_earlier()
        if earlier is not None and self.rung == "floor":
            self.rung = "done"
            log.warning(
                "LMS: %s; planning again for %s, whose plan measured %s, under the device memory",
                why,
                format_size(earlier.budget_bytes),
                format_size(earlier.measured_peak_bytes),
            )
            # closest: the earlier plan may have been the closest one, nothing fitting its budget
            # in simulation (ResNet50 at 0.4x: measured 255 MiB of 271, then refused here)
            self._plan(self._asked(), budget=earlier.budget_bytes, closest=True)
            return
        calibration.keep_or_fail(why)

    def _asked(self):
        """The parameters asked for, in TensorFlow's own order once it refused the enforced one."""
        asked = self.pipeline.options.parameters
        return asked.resolved(ordering=0) if self.free_order else asked

    def _plan(self, parameters=None, budget=None, closest=False, retrace=True) -> Prepared:
        """A new plan (`parameters` default: those asked), from a fresh trace unless it is the
        first (a rewrite edits its trace in place), begun as a new attempt of the loop. Where
        the loop measures, the first plan (or, with `closest`, this one) is the closest one even
        when none fits in simulation: the measurement decides. The first plan's budget is the
        calibration cache's for this step, where it holds one."""
        if retrace:
            self.function = _retraced(self.function)
        store = self.pipeline.mechanism.store
        if store is not None:  # the last plan's arena: host memory the next may need
            store.drop_arena()
        first = self.calibration is not None and not self.calibration.attempts
        measured = (first or closest) and self.meter is not None
        request = Request(parameters or self._asked(), budget, measured, cached=first)
        self.prepared = self.pipeline.prepare(self.function, self.args, request)
        if self.calibration is not None:
            planned = self.prepared.planned
            simulated = planned.tuned.simulation.peak_bytes
            self.calibration.begin(planned.budget_bytes, simulated, planned.shortfall)
        return self.prepared


def _retraced(function):
    """A new tf.function of the same Python function: the rewrite edits a trace in place, so a
    new plan needs a fresh one."""
    return tf.function(function.python_function, input_signature=function.input_signature)
