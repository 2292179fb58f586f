"""Benchmark: planning a split plan (issue 44, item 1) against TensorFlow's trace time.

Each (case, mode, repeat) runs in a fresh process: the step of one of the suite's workloads (or
a Keras application: models outside the suite) at a size past its swap-only limit, planned for
the emulated device with `split="auto"` (nothing runs) in one of two modes:

- `report`: `LMS.plan_only(made=False)`, what the limit searches' predictions pay: a plan that
  fits as modelled (lms/split/modelled.py) is reported from the model, its split ops not made;
- `made`: the plan `prepare` (and `plan_only` by default: `inv plan`) makes before its rewrite: the
  rounds on the model, then the ops made once, analysed and tuned for real (and rounds made
  one by one when that misses).

Printed per case and mode: trace, analysis and tune seconds, the goal's ratio (analysis + tune)
/ trace (<= 0.5 asked), the simulated device and host peaks (MiB: the model's against the
made plan's), the ops split, median and range over the repeats; the 1-minute load average is
in each JSON line. The `-gpu` cases plan with a GPU's copies (`mechanism="device-copy"`, as
`inv plan --spec split-gpu --device-memory 32GiB`): their pieces are made one by one, which the
model does not model, so they are made in both modes.

    python benchmarks/split_plan_speed.py [--repeats 1] [--case NAME ...] [--mode report ...]
        [--json FILE]
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

# name: (workload, resolution, device memory[, mechanism]): issue 44's sizes
CASES = {
    "googlenet-2048": ("googlenet", 2048, "400MiB"),
    "googlenet-4096": ("googlenet", 4096, "400MiB"),
    "resnet50-1856": ("resnet50", 1856, "400MiB"),
    "unet3d-128": ("unet3d", 128, "400MiB"),
    "unet3d-144": ("unet3d", 144, "400MiB"),
    "mobilenetv2-2048": ("MobileNetV2", 2048, "400MiB"),
    "densenet121-2048": ("DenseNet121", 2048, "400MiB"),
    "xception-1024": ("Xception", 1024, "400MiB"),
    "unet3d-320-gpu": ("unet3d", 320, "32GiB", "device-copy"),
    "resnet50-16000-gpu": ("resnet50", 16000, "32GiB", "device-copy"),
}
DEFAULT_CASES = [name for name in CASES if not name.endswith("-gpu")]
MODES = ("report", "made")
COLUMNS = ("trace_s", "analysis_s", "tune_s")


def measure(child: str) -> dict:
    """One case in one mode (`name:mode`) in this process: lms's timings, peaks and splits."""
    import tensorflow as tf
    from lms_cases import named_case

    import lms
    from lms.plan_request import Request

    name, mode = child.split(":")
    workload, resolution, memory, *mechanism = CASES[name]
    case = named_case(workload, resolution, 1)
    specs = [tf.TensorSpec.from_tensor(case.images), tf.TensorSpec.from_tensor(case.labels)]
    options = {"mechanism": mechanism[0]} if mechanism else {}
    planner = lms.LMS(device_memory=memory, split="auto", **options)
    request = Request(keep_closest=True, cached=True, made=mode == "made")
    planned = planner.pipeline.plan(case.step, specs, request)
    simulation = planned.tuned.simulation
    return {
        "case": name,
        "mode": mode,
        "fits": simulation.peak_bytes <= planned.budget_bytes,
        "modelled": planned.analysis.modelled,
        "peak_mib": round(simulation.peak_bytes / 2**20, 1),
        "host_mib": round(simulation.host_peak_bytes / 2**20, 1),
        "splits": len(planned.splits),
        "chained": sum(1 for s in planned.splits if s.chained_after),
        "ops": len(planned.analysis.ops),
        **{column: planned.timings.get(column) for column in COLUMNS},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=1, help="fresh processes per case")
    parser.add_argument(
        "--case", action="append", choices=sorted(CASES), help="default: all but the -gpu ones"
    )
    parser.add_argument("--mode", action="append", choices=MODES, help="default: both")
    parser.add_argument("--json", help="also write every run to this file")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    from tabulate import tabulate

    names, modes = args.case or DEFAULT_CASES, args.mode or list(MODES)
    children = [f"{name}:{mode}" for name in names for mode in modes]
    runs = []
    for repeat in range(args.repeats):  # interleaved: a busy period touches every case
        for k, child in enumerate(children, 1):
            print(f"[{repeat + 1}/{args.repeats}] {k} of {len(children)}: {child}", flush=True)
            run = run_child(child, args.timeout, __file__)
            runs.append({**run, "child": child, "repeat": repeat})
            print(json.dumps(run), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    rows = []
    for child in children:
        mine = [r for r in runs if r["child"] == child and "error" not in r]
        if not mine:
            rows.append([*child.split(":"), "failed", *["-"] * 8])
            continue
        last = mine[-1]
        rows.append(
            [
                *child.split(":"),
                *(spread(r.get(c) for r in mine) for c in COLUMNS),
                spread(ratio(r) for r in mine),
                last["peak_mib"],
                last["host_mib"],
                f"{last['splits']} ({last['chained']})",
                last["modelled"],
                all(r["fits"] for r in mine),
            ]
        )
    head = ["case", "mode", *COLUMNS, "(analysis+tune)/trace", "peak MiB", "host MiB"]
    print(tabulate(rows, headers=[*head, "split (chained)", "modelled", "fits"]))


if __name__ == "__main__":
    main()
