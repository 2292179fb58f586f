"""Benchmark: planning a split plan (issue 44, item 1) against TensorFlow's trace time.

Each (case, repeat) runs in a fresh process: the step of one of the suite's workloads (or a Keras
application: models outside the suite) at a size past its swap-only limit, planned for the
emulated device (`LMS(device_memory, split="auto").plan_only`: trace, analysis, the splitting
rounds, chaining, tuning; nothing runs). Printed per case: trace, analysis and tune seconds
(tune holds the rounds and the chained rebuild), the goal's ratio (analysis + tune) / trace
(<= 0.5 asked), the ops split and the planned graph's ops (a split op's alike pieces are one
loop: lms/split/looped.py), median and range over the repeats, and the 1-minute load average
beside each process.

    python benchmarks/split_plan_speed.py [--repeats 1] [--case NAME ...] [--json FILE]
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "support"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from plan_speed import ratio, run_child, spread  # noqa: E402  (the same columns and processes)

# name: (workload, resolution, device memory): issue 44's sizes
CASES = {
    "googlenet-2048": ("googlenet", 2048, "400MiB"),
    "googlenet-4096": ("googlenet", 4096, "400MiB"),
    "resnet50-1856": ("resnet50", 1856, "400MiB"),
    "unet3d-128": ("unet3d", 128, "400MiB"),
    "unet3d-144": ("unet3d", 144, "400MiB"),
    "mobilenetv2-2048": ("MobileNetV2", 2048, "400MiB"),
}
COLUMNS = ("trace_s", "analysis_s", "tune_s")


def measure(name: str) -> dict:
    """One case in this process: lms's timings of the plan, its splits and graph."""
    import tensorflow as tf
    from lms_cases import named_case

    import lms

    workload, resolution, memory = CASES[name]
    case = named_case(workload, resolution, 1)
    specs = [tf.TensorSpec.from_tensor(case.images), tf.TensorSpec.from_tensor(case.labels)]
    planner = lms.LMS(device_memory=memory, split="auto")
    report = planner.plan_only(case.step, *specs)
    splits = report.splits or ()
    return {
        "case": name,
        "fits": report.fits,
        "splits": len(splits),
        "chained": sum(1 for s in splits if s.get("chained_after")),
        "ops": report.analysis.vertices if report.analysis else None,
        **{column: report.timings_s.get(column) for column in COLUMNS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per case")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    parser.add_argument("--json", help="also write every run to this file")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    from tabulate import tabulate

    names = args.case or list(CASES)
    runs = []
    for repeat in range(args.repeats):  # interleaved: a busy period touches every case
        for k, name in enumerate(names, 1):
            print(f"[{repeat + 1}/{args.repeats}] case {k} of {len(names)}: {name}", flush=True)
            run = run_child(name, args.timeout, __file__)
            runs.append({**run, "repeat": repeat})
            print(json.dumps(run), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    rows = []
    for name in names:
        mine = [r for r in runs if r["case"] == name and "error" not in r]
        if not mine:
            rows.append([name, "failed", *["-"] * 6])
            continue
        rows.append(
            [
                name,
                *(spread(r.get(c) for r in mine) for c in COLUMNS),
                spread(ratio(r) for r in mine),
                mine[-1]["splits"],
                mine[-1]["ops"],
                all(r["fits"] for r in mine),
            ]
        )
    head = ["case", *COLUMNS, "(analysis+tune)/trace", "split", "graph ops", "fits"]
    print(tabulate(rows, headers=head))


if __name__ == "__main__":
    main()
