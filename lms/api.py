"""`LMS`: enable Large Model Support in one line, on a training step or as a Keras callback.

    step = lms.LMS(device_memory="16GiB").wrap(train_step)   # a tf.function training step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # or as a Keras callback

`LMS` checks the options (`lms.Options`) and holds the pipeline that makes plans for the device
they describe (lms/pipeline.py: the device worked out once, then trace, analyse, tune, split,
rewrite); `LMSFunction` (lms/function.py) runs a wrapped step and its closed loop
(lms/closed_loop.py); the report is an `lms.PlanReport` (lms/values/report.py).
"""

import functools
import logging

import keras
import tensorflow as tf

from lms.closed_loop import peak_meter
from lms.function import LMSFunction
from lms.pipeline import Pipeline, Request
from lms.values.options import Options
from lms.values.report import DiskUsage, PlanReport

log = logging.getLogger("lms")


class LMS(keras.callbacks.Callback):
    """Large Model Support for a TensorFlow 2 training step.

    Takes `lms.Options`' fields as keyword arguments (`device_memory` also as the first
    argument), each with its default and meaning there; they are checked before any work and
    kept as `options`. `report` is the last plan's `lms.PlanReport`; `disk_usage()` what the
    host store's disk held (the `host_disk` option).

    What it worked out once: `pipeline.device` (an `lms.device.target.Device`: the target, its
    memory, the budget, the kernels) and `pipeline.mechanism` (how bytes move on it); `budget`,
    `device_bytes` and `target` are the device's, `store` the emulated device's host store.
    """

    def __init__(self, device_memory=None, **options):
        super().__init__()
        self.options = Options(device_memory, **options)
        self.pipeline = Pipeline(self.options)
        self.report: PlanReport | None = None

    @property
    def parameters(self):
        return self.options.parameters

    @property
    def target(self):
        return self.pipeline.device.target

    @property
    def budget(self) -> int:
        """The bytes a plan may fill: device memory less the reserve, times the safety ratio."""
        return self.pipeline.device.budget_bytes

    @property
    def device_bytes(self) -> int:
        return self.pipeline.device.device_bytes

    @property
    def store(self):
        """The emulated device's host store (swapped tensors and pieces), else None."""
        return self.pipeline.mechanism.store

    def disk_usage(self) -> DiskUsage | None:
        """The host store's disk (the `host_disk` option) as the steps so far used it: the most
        bytes it held at once and, where a plan spilled, its measured speed (`lms.DiskUsage`);
        None without a disk."""
        if self.options.host_disk is None:
            return None
        arrays = self.store.arrays  # a disk goes with the host store only (mechanism_for)
        link = arrays.measured_link
        return DiskUsage(
            str(self.options.host_disk),
            arrays.disk_peak_bytes,
            link.out_bandwidth if link else None,
            link.bandwidth if link else None,
        )

    @functools.cached_property
    def meter(self):
        """The closed loop's peak meter (lms.calibration.PeakMeter), made on first use; None
        where the loop is off or the device keeps no allocator statistics."""
        return peak_meter(self.pipeline)

    def wrap(self, function) -> LMSFunction:
        """The step `function` (a tf.function or a Python function of tensors) with LMS."""
        return LMSFunction(self, function)

    def plan_only(self, function, *specs, made: bool = True) -> PlanReport:
        """Trace, analyse and tune for `specs` without rewriting or running: the report. When
        nothing fits, the report has `fits` False and the parameters that came closest.

        made: False reports a split plan that fits as modelled (lms/split/modelled.py) without
        making its split ops (`PlanReport.splits_modelled` then True): 1.3-2.6x the trace where
        the made plan takes 2.2-14x, for a report whose splits and peaks are the model's, not
        those of the plan that runs (DeepLabV3+ 512² b1 in 450 MiB: 217 ops reported, 406 made;
        host peaks up to 35 % short: docs/lms.md). For many quick answers that a run confirms
        (the suite's limit predictions); True (the default) reports the plan `prepare` makes."""
        if not hasattr(function, "get_concrete_function"):
            function = tf.function(function)
        request = Request(keep_closest=True, cached=True, made=made)
        planned = self.pipeline.plan(function, specs, request)
        self.report = self.pipeline.report(planned)
        return self.report

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
