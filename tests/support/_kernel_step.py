"""Run by test_kernels in a fresh process (TF_CPU_ALLOCATOR_USE_BFC=true, TF_ENABLE_ONEDNN_OPTS as
the test sets it): a suite workload's measured and simulated peak, without LMS ("plain") or with
everything swappable swapped in the enforced order ("all"), simulated with the temporaries of
the kernels this process computes with.

    python tests/_kernel_step.py WORKLOAD RESOLUTION BATCH plain|all

Prints one JSON line: {"kernels", "measured", "simulated"}.
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402
from _lms_measure import measured_peak  # noqa: E402
from lms_cases import workload_case  # noqa: E402

import lms  # noqa: E402
from lms.device.rewriter import rewrite  # noqa: E402
from lms.graph.cpu_host import cpu_kernels  # noqa: E402


def main(workload: str, resolution: int, batch: int, mode: str) -> None:
    keras.utils.set_random_seed(0)
    case = workload_case(workload, resolution, batch)
    concrete = tf.function(case.step.python_function).get_concrete_function(
        case.images, case.labels
    )
    analysis = lms.internal.analyze(
        concrete.graph, quiet=True, paired_reads=lms.internal.cpu_paired_reads()
    )
    analysis.kernels = cpu_kernels()
    plan, function = None, case.step
    if mode == "all":
        plan = lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=1))
        function = rewrite(concrete, analysis, plan, lms.internal.HostStore())
    measured = measured_peak(function, case)
    simulated = lms.internal.simulate(analysis, plan, lms.internal.BestFitAllocator).peak_bytes
    print(json.dumps({"kernels": analysis.kernels, "measured": measured, "simulated": simulated}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
