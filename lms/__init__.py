"""Large Model Support for stock TensorFlow 2.x: swap tensors of a training step to host memory
and back so that what does not fit in device memory trains.

    import lms
    step = lms.LMS(device_memory="16GiB").wrap(train_step)      # a tf.function step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # Keras

Logging goes to the `lms` logger (TFLMSv2's messages).

Names are imported on first use, so `lms.check_options`, `lms.parse_size`, `lms.Parameters` and
the errors cost no TensorFlow import: a program that only checks a configuration stays light.
"""

import importlib

# public name -> the module that defines it
_EXPORTS = {
    "AUTO": "lms.parameters",
    "Analysis": "lms.graph",
    "BestFitAllocator": "lms.allocator",
    "DeviceCopy": "lms.swap",
    "HostStore": "lms.swap",
    "LMS": "lms.api",
    "LMSError": "lms.errors",
    "LMSFunction": "lms.api",
    "Link": "lms.link",
    "NothingFitsError": "lms.errors",
    "ParameterError": "lms.errors",
    "Parameters": "lms.parameters",
    "Plan": "lms.planner",
    "Projection": "lms.steptime",
    "StepProfile": "lms.profile",
    "SwapGraph": "lms.steptime",
    "Simulation": "lms.simulator",
    "Tuned": "lms.tuner",
    "analyze": "lms.analysis",
    "check_options": "lms.options",
    "cpu_paired_reads": "lms.analysis",
    "explain_peak": "lms.explain",
    "format_size": "lms.budget",
    "gpu_memory_bytes": "lms.budget",
    "named_links": "lms.link",
    "parse_size": "lms.budget",
    "plan": "lms.planner",
    "profile_step": "lms.profile",
    "project": "lms.steptime",
    "simulate": "lms.simulator",
    "tune": "lms.tuner",
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
