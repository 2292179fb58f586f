"""`LMSFunction`: a training step with LMS, run one step at a time.

On the first call for a given input signature the step is planned (lms/pipeline.py: traced,
analysed, tuned against the memory budget, rewritten with swaps and split ops) and its closed
loop begins (lms/closed_loop.py: while a plan is new its measured device peak corrects it); later
calls run the rewritten step. It also reads what ran: the swap traffic, a profile for the
step-time model, TensorFlow's run metadata.
"""

import logging
from contextlib import nullcontext

import tensorflow as tf

from lms import _tf_private
from lms.closed_loop import ClosedLoop
from lms.device.host_memory import pinned_hint
from lms.device.host_store import Traffic
from lms.device.target import is_host_out_of_memory
from lms.errors import HostMemoryError, ParameterError
from lms.timing.steptime import SwapGraph
from lms.values.report import PlanReport, SwapTraffic

log = logging.getLogger("lms")


class LMSFunction:
    """A training step with LMS: call it like the tf.function it wraps.

    `lms` is the `lms.LMS` that plans it: its pipeline makes the plans, its meter measures them,
    and its `report` shows the last one."""

    def __init__(self, lms, function):
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        if _tf_private.jit_compiled(function):
            raise ParameterError(
                "LMS cannot rewrite a step compiled with XLA (tf.function(jit_compile=True)): "
                "XLA compiles the whole step as one cluster, which cannot hold host-placed swap "
                "ops; wrap the step without jit_compile"
            )
        self.lms, self.function = lms, function
        self.pipeline = lms.pipeline
        self._loops = {}  # input signature -> its ClosedLoop
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
        """Plan for these arguments (tensors or TensorSpecs) unless planned: (the callable that
        runs the plan, its lms.internal.Tuned)."""
        loop = self._loop(args)
        return loop.prepared.callable, loop.prepared.tuned

    def _loop(self, args) -> ClosedLoop:
        key = self._key(args)
        if key not in self._loops:
            self._loops[key] = ClosedLoop(self.pipeline, self.function, args, self.lms.meter)
            self.lms.report = self._loops[key].report
        return self._loops[key]

    @property
    def calibrating(self) -> bool:
        """Whether the closed loop is still measuring a plan (of any input signature): the
        steps until it holds may run over the budget, and each correction re-plans and
        rewrites the step (lms/closed_loop.py)."""
        return any(loop.calibrating for loop in self._loops.values())

    @property
    def plans(self) -> int:
        """How many plans were made so far (all input signatures): grows with each of the
        closed loop's corrections."""
        attempts = sum(len(loop.calibration.attempts) for loop in self._calibrated())
        return attempts or len(self._loops)

    def _calibrated(self):
        return [loop for loop in self._loops.values() if loop.calibration is not None]

    def __call__(self, *args):
        """One step. The host store is empty after it, whatever ran: a step runs to its end
        before the call returns, so what is left would never be read (a swap-in that did not
        run) or belongs to a step that failed. One step at a time per LMS object.

        While a plan is new, the step's device peak is measured (the closed loop): a step over
        the budget makes the next one run a plan made for less; a step that fails for lack of
        device memory (GPU) is planned again and run again. TensorFlow cannot undo what such a
        step did before it failed: variables it had already updated are updated again (with an
        enforced order the updates come last, after the memory-hungry backward pass)."""
        loop = self._loop(args)
        measured = loop.before_step()
        store = self.pipeline.mechanism.store
        try:
            result = self._run(loop.prepared.callable, args)
        except tf.errors.ResourceExhaustedError as error:
            if store is not None:
                store.clear()
            if self.pipeline.device.target.device_copies and is_host_out_of_memory(error):
                raise HostMemoryError(
                    f"host memory: the step ran out of the host's memory for its copies "
                    f"({pinned_hint()}): {error.message.splitlines()[0]}"
                ) from None
            if loop.meter is None:
                raise
            try:
                loop.out_of_memory()
            finally:
                self.lms.report = loop.report
            return self(*args)
        except Exception as error:
            if store is not None:
                store.clear()
            refused = isinstance(error, tf.errors.InvalidArgumentError) and "in a cycle" in str(
                error
            )
            if not (refused and loop.ordered):
                raise
            prepared = loop.refused_order(error)
            self.lms.report = loop.report
            result = self._run(prepared.callable, args)
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
            try:
                loop.after_step()
            finally:
                self.lms.report = loop.report
        return result

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
        device = self.pipeline.device.target.compute_device
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
        device_copies = self.pipeline.device.target.device_copies
        names = copy_names(self.run_metadata(*args)) if device_copies else {}
        space = profiled_space(self, *args)
        profile = step_profile(space, names)
        if device_copies and profile.copies:  # GPU only: the copies' own bytes and durations
            self._copies = (callable_, swap_copies(space, names))
        graph = getattr(callable_, "graph", None)
        swaps = (
            swap_graph(graph, self.pipeline.options.batch_size)
            if graph is not None
            else SwapGraph({})
        )
        return profile, swaps

    def reset_traffic(self) -> None:
        """Forget the swap traffic counted so far (e.g. after warm-up steps). A GPU's copy
        events of the last `profile()` stay: they are one step's, and hold for its plan."""
        if self.pipeline.mechanism.store is not None:
            self.pipeline.mechanism.store.take_traffic()
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
        steps, link = self._steps, self.pipeline.options.link
        report = self.lms.report
        planned = _planned_per_step(report)
        timed = {}  # direction -> (bytes, seconds) per step, of copies whose duration was measured
        others = None
        if self.pipeline.device.target.emulated:
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
                two_devices = self.pipeline.device.target.kind == "two-device"
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
        current = any(loop.prepared.callable is profiled for loop in self._loops.values())
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
