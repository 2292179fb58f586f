"""Benchmark: the rate at the split limit against the plain rate at the plain limit (issue 44,
item 3: >= 0.6 asked), the two steps interleaved in one process so that the machine's drift
falls on both alike.

One process: the workload's plain step at the plain limit (no LMS) and its step at the split
limit wrapped by `lms.LMS(device_memory, split="auto")` on the emulated device. The split step
runs until the closed loop keeps a plan (`--fixed`: the first plan kept) and its peak is
measured, before the plain model exists (its variables would count in the device's peak); then
each round times the plain step (`--plain-steps` calls) and one split step, back to back.
Printed per round: both rates (Mpx/s, Mvox/s for the 3D U-Net: the input's pixels or voxels per
second) and their ratio; then the ratios' median and range, and the split plan (ops split,
chained, simulated and measured peaks). Needs TF_CPU_ALLOCATOR_USE_BFC=true.

    TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python benchmarks/split_rate_interleaved.py \\
        googlenet 768 4096 [--memory 400MiB] [--rounds 3] [--plain-steps 10] [--fixed]
        resnet50 192 2560
        unet3d 32 144

The limits are the ones measured (benchmarks/README.md, `lms_split_measured.py`): the plain
limit is the largest size that fits the memory without LMS, the split limit the largest that
trains split. A workload is one of the suite's or a Keras application's name.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support"), str(ROOT / "benchmarks")]


def _seconds(step, case, calls: int) -> float:
    started = time.perf_counter()
    for _ in range(calls):
        float(step(case.images, case.labels))
    return (time.perf_counter() - started) / calls


def _elements(case) -> int:
    """The input's pixels (voxels) per step: every axis but the batch's and the channels'."""
    shape = case.images.shape
    count = shape[0]
    for size in shape[1:-1]:
        count *= size
    return int(count)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("workload")
    parser.add_argument("plain_resolution", type=int)
    parser.add_argument("split_resolution", type=int)
    parser.add_argument("--memory", default="400MiB", help="the emulated device's memory")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--plain-steps", type=int, default=10, help="plain calls per round")
    parser.add_argument("--fixed", action="store_true", help="the first plan kept (no loop)")
    args = parser.parse_args(argv)

    import tensorflow as tf
    from lms_cases import named_case
    from lms_split_measured import SETTLE, settle

    import lms

    split = named_case(args.workload, args.split_resolution, 1)
    calibration = {"calibration_steps": 0} if args.fixed else {}
    planner = lms.LMS(device_memory=args.memory, split="auto", **calibration)
    step = planner.wrap(split.step)
    settle(step, split, 2 if args.fixed else SETTLE)  # fixed: planned, then warm
    # the split step's peak, measured before the plain model's variables share the device
    tf.config.experimental.reset_memory_stats("CPU:0")
    float(step(split.images, split.labels))
    split_peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    plain = named_case(args.workload, args.plain_resolution, 1)
    _seconds(plain.step, plain, 2)  # traced and warm
    unit = "Mvox/s" if len(plain.images.shape) == 5 else "Mpx/s"
    ratios = []
    for k in range(args.rounds):
        plain_s = _seconds(plain.step, plain, args.plain_steps)
        split_s = _seconds(step, split, 1)
        plain_rate = _elements(plain) / plain_s / 1e6
        split_rate = _elements(split) / split_s / 1e6
        ratios.append(split_rate / plain_rate)
        print(
            f"round {k + 1} of {args.rounds}: plain {args.plain_resolution} {plain_s:.3f} s "
            f"{plain_rate:.3f} {unit}; split {args.split_resolution} {split_s:.1f} s "
            f"{split_rate:.3f} {unit}; ratio {ratios[-1]:.2f}",
            flush=True,
        )
    report = planner.report
    print(
        json.dumps(
            {
                "workload": args.workload,
                "plain_resolution": args.plain_resolution,
                "split_resolution": args.split_resolution,
                "ratio_median": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "splits": len(report.splits or ()),
                "chained": sum(1 for s in report.splits or () if s.get("chained_after")),
                "simulated_peak_bytes": report.peak_bytes_with_lms,
                "measured_peak_bytes": split_peak,
                "closed_loop": report.calibration is not None,
            }
        )
    )


if __name__ == "__main__":
    main()
