"""Large Model Support for stock TensorFlow 2.x: swap tensors of a training step to host memory
and back so that what does not fit in device memory trains.

    import lms
    step = lms.LMS(device_memory="16GiB").wrap(train_step)      # a tf.function step
    model.fit(data, callbacks=[lms.LMS(device_memory="16GiB")])  # Keras

Logging goes to the `lms` logger (TFLMSv2's messages).
"""

from lms.allocator import BestFitAllocator
from lms.analysis import Analysis, analyze, cpu_paired_reads
from lms.api import LMS, LMSFunction
from lms.errors import LMSError, NothingFitsError, ParameterError
from lms.explain import explain_peak
from lms.parameters import AUTO, Parameters
from lms.planner import Plan, plan
from lms.simulator import Simulation, simulate
from lms.swap import DeviceCopy, HostStore
from lms.tuner import Tuned, tune

__all__ = [
    "AUTO",
    "LMS",
    "LMSError",
    "LMSFunction",
    "Analysis",
    "BestFitAllocator",
    "DeviceCopy",
    "HostStore",
    "NothingFitsError",
    "ParameterError",
    "Parameters",
    "Plan",
    "Simulation",
    "Tuned",
    "analyze",
    "cpu_paired_reads",
    "explain_peak",
    "plan",
    "simulate",
    "tune",
]
