"""Benchmark: planning speed on the seeds' GPU-size graphs, against TensorFlow's trace time.

Each (case, repeat) runs in a fresh process: the suite builds the workload at full size (only its
weights are allocated), and lms plans it for a GPU as `inv plan --device-memory` does (auto-tuned,
swapping alone: the suite's split "off"; mechanism "device-copy") and rewrites it with the GPU's
swap ops (`LMSFunction.prepare`: nothing runs, no closed loop, host memory not checked). Printed
per case: trace, analysis, tune and rewrite seconds (lms's plan report timings), the goal's ratio
(analysis + tune) / trace (issue 41: <= 0.5), all of lms's work (analysis + tune + rewrite: lms
pauses Python's garbage collector while it analyses and tunes, and a full collection that would
have fallen there may fall in the rewrite instead), median and range over the repeats, and the
1-minute load average beside each process (other work on the machine slows every column).

    python benchmarks/plan_speed.py [--repeats 3] [--case NAME ...] [--json FILE]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# name: (workload, resolution, batch, precision, GPU memory); issue 41's sizes
CASES = {
    "resnet50-9500": ("resnet50", 9500, 1, "fp32", "32GiB"),
    "unet3d-192": ("unet3d", 192, 1, "fp32", "16GiB"),
    "deeplabv3plus-3200": ("deeplabv3plus", 3200, 1, "fp32", "16GiB"),
}
COLUMNS = ("trace_s", "analysis_s", "tune_s", "rewrite_s")


def measure(name: str) -> dict:
    """One case in this process: lms's timings of the plan and its rewrite."""
    import lms
    from suite.workloads import build_workload, data, get_workload, training

    workload, resolution, batch, precision, device_memory = CASES[name]
    info = get_workload(workload)
    model, loss_fn = build_workload(workload, resolution, batch, precision, info.default_classes)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), precision)
    specs = data.batch_specs(info, resolution, batch, info.default_classes)
    planner = lms.LMS(
        device_memory=device_memory,
        mechanism="device-copy",
        split="off",
        batch_size=batch,
        calibration_steps=0,
        host_memory=None,
    )
    function = planner.wrap(step)
    fits = True
    try:
        callable_, tuned = function.prepare(*specs)
    except lms.NothingFitsError:  # timed up to the tuner's verdict; nothing to rewrite
        fits = False
    report = planner.report
    timings = dict(report.timings_s) if report is not None else {}
    return {
        "case": name,
        "ops": report.analysis.vertices if report is not None and report.analysis else None,
        "fits": fits,
        "simulations": report.simulations if report is not None else None,
        "swapped_tensors": report.swapped_tensors if report is not None else None,
        "swap_ins": report.swap_ins if report is not None else None,
        "rewritten_nodes": len(callable_.graph.as_graph_def().node) if fits else None,
        **{column: timings.get(column) for column in COLUMNS},
    }


def run_child(name: str, timeout: float, script: str = __file__) -> dict:
    """`script --child name` in a fresh process: its JSON line, the load beside it and its
    seconds (benchmarks/split_plan_speed.py runs its own cases through it too)."""
    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, script, "--child", name],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "CUDA_VISIBLE_DEVICES": ""},
    )
    wall = time.perf_counter() - started
    if completed.returncode != 0:
        tail = completed.stderr.strip().splitlines()[-3:]
        return {"case": name, "error": " | ".join(tail), "load": [load_before, None]}
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    result["load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["process_s"] = round(wall, 1)
    return result


def lms_seconds(run: dict) -> float | None:
    parts = [run.get(c) for c in ("analysis_s", "tune_s", "rewrite_s")]
    return None if any(p is None for p in parts) else sum(parts)


def ratio(run: dict) -> float | None:
    if run.get("trace_s") and run.get("analysis_s") is not None and run.get("tune_s") is not None:
        return (run["analysis_s"] + run["tune_s"]) / run["trace_s"]
    return None


def spread(values) -> str:
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    median = statistics.median(values)
    if len(values) == 1:
        return f"{median:.2f}"
    return f"{median:.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--case", action="append", choices=sorted(CASES), help="default: all")
    parser.add_argument("--json", help="also write every run to this file")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds per process")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child)))
        return
    from tabulate import tabulate

    names = args.case or list(CASES)
    runs = []
    for repeat in range(args.repeats):  # interleaved: a busy period touches every case
        for name in names:
            run = run_child(name, args.timeout)
            run["repeat"] = repeat
            runs.append(run)
            shown = {k: run.get(k) for k in ("case", "repeat", "load", *COLUMNS, "error")}
            print(json.dumps(shown), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    rows = []
    for name in names:
        mine = [r for r in runs if r["case"] == name and "error" not in r]
        if not mine:
            rows.append([name, "failed"] + [""] * 9)
            continue
        loads = [load for r in mine for load in r["load"] if load is not None]
        rows.append(
            [
                name,
                mine[0]["ops"],
                *(spread(r[c] for r in mine) for c in COLUMNS),
                spread(ratio(r) for r in mine),
                spread(lms_seconds(r) for r in mine),
                "yes" if all(r["fits"] for r in mine) else "no",
                f"{min(loads):.1f}-{max(loads):.1f}",
            ]
        )
    print(
        tabulate(
            rows,
            [
                "case",
                "ops",
                "trace s",
                "analysis s",
                "tune s",
                "rewrite s",
                "(analysis+tune)/trace",
                "analysis+tune+rewrite s",
                "fits",
                "load (1 min)",
            ],
            tablefmt="github",
        )
    )
    print(f"median (min-max) over {args.repeats} fresh processes per case; goal <= 0.5")


if __name__ == "__main__":
    main()
