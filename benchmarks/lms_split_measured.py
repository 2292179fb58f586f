"""A split plan measured (issue 31): one step wrapped by `lms.LMS(device_memory, split=...)` in
this fresh process on the emulated device, run until the closed loop settles, then three steps
measured; or the plain step. Prints one JSON line: the measured peak, the plan's budget and
simulated peak, the ops split, the seconds per step, the closed loop's attempts (planned for,
simulated, measured) and the last plan's timings. Needs TF_CPU_ALLOCATOR_USE_BFC=true.

    TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python benchmarks/lms_split_measured.py \\
        googlenet 2048 1 400MiB auto          # or "off", or "plain" (no LMS)
        googlenet 2048 1 400MiB auto alone    # split ops not chained (split_chains=False)
        googlenet 2048 1 400MiB auto alone fixed   # the first plan kept (no closed loop): chained
                                                  # and alone then split the same ops
        unet3d 144 1 400MiB auto chained loop fixed-arena  # the host store's arena left the size
                                                  # the plan made it, even when a step outgrows it

The workload is one of the suite's, or a Keras application's name (MobileNetV2, DenseNet121):
models outside the suite.

Run each case in its own process, several times, and with TF_ENABLE_ONEDNN_OPTS=0 and =1:
the executor's order and the allocator's state vary between processes.
"""

import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import tensorflow as tf  # noqa: E402
from lms_cases import named_case  # noqa: E402

import lms  # noqa: E402
from lms.device.host_arrays import HostArrays  # noqa: E402

SETTLE = 6  # calls before measuring: the closed loop's plans and their measured steps


def settle(step, case, calls: int = SETTLE) -> None:
    """`calls` calls of the wrapped `step`, then more until the closed loop keeps a plan: the
    steps timed after make, measure or correct no plan (also split_rate_interleaved.py's)."""
    for _ in range(calls):
        float(step(case.images, case.labels))
    while step.calibrating:
        float(step(case.images, case.labels))


def measured(function, case, steps: int) -> tuple[int, float]:
    tf.config.experimental.reset_memory_stats("CPU:0")
    started = time.perf_counter()
    for _ in range(steps):
        float(function(case.images, case.labels))
    seconds = (time.perf_counter() - started) / steps
    return tf.config.experimental.get_memory_info("CPU:0")["peak"], seconds


def main(
    workload: str,
    resolution: str,
    batch: str,
    memory: str,
    split: str,
    chains="",
    loop="",
    arena="",
) -> None:
    if arena == "fixed-arena":  # the control of issue 44 session 7's arena growth
        HostArrays.outgrown = lambda self, held_peak_bytes: 0
    case = named_case(workload, int(resolution), int(batch))
    if split == "plain":
        float(case.step(case.images, case.labels))
        peak, seconds = measured(case.step, case, 2)
        print(json.dumps({"plain_peak_bytes": peak, "step_s": seconds}))
        return
    calibration = {"calibration_steps": 0} if loop == "fixed" else {}
    planner = lms.LMS(
        device_memory=memory, split=split, split_chains=chains != "alone", **calibration
    )
    step = planner.wrap(case.step)
    settle(step, case)
    step.reset_traffic()
    peak, seconds = measured(step, case, 3)
    report, traffic = planner.report, step.traffic()
    print(
        json.dumps(
            {
                "measured_peak_bytes": peak,
                "device_memory": memory,
                "budget_bytes": report.budget_bytes,
                "simulated_peak_bytes": report.peak_bytes_with_lms,
                "splits": len(report.splits or ()),
                "chained": sum(1 for s in report.splits or () if s.get("chained_after")),
                "host_in_bytes_per_step": traffic.in_bytes_per_step,
                "host_out_bytes_per_step": traffic.out_bytes_per_step,
                "step_s": seconds,
                # the last plan's: trace, analysis, tuning (splitting and chaining included)
                "plan_timings_s": dict(report.timings_s or {}),
                "calibration": report.calibration,
            },
            default=str,
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
