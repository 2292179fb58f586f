"""Benchmark: how long lms takes to analyse, tune and rewrite the seeds' largest graphs.

Goals (issue 3): analysis + rewrite <= 2 s and auto-tune <= 5 s for the largest seed-size graph on
a 2-core machine (TFLMSv2 needed 18 s to edit and 6.3 minutes to tune a 3D U-Net graph). Nothing
runs: the step is traced from TensorSpecs at full size, so only the weights are allocated.

    python benchmarks/lms_speed.py [--device-memory 16GiB]
"""

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CASES = [  # (workload, resolution, batch, precision): the seeds' full sizes
    ("googlenet", 2240, 15, "fp16"),
    ("deeplabv3plus", 1600, 16, "fp32"),
    ("resnet50", 4000, 1, "fp32"),
    ("unet3d", 256, 1, "fp32"),
]


def measure(workload, resolution, batch, precision, device_memory):
    import lms
    from lms.device.rewriter import rewrite
    from suite.workloads import build_workload, data, get_workload, training

    info = get_workload(workload)
    model, loss_fn = build_workload(workload, resolution, batch, precision)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), precision)
    specs = data.batch_specs(info, resolution, batch, info.default_classes)
    started = time.perf_counter()
    concrete = step.get_concrete_function(*specs)
    traced = time.perf_counter()
    analysis = lms.internal.analyze(concrete.graph)
    analysed = time.perf_counter()
    planner = lms.LMS(device_memory=device_memory)
    try:
        tuned = lms.internal.tune(analysis, planner.budget, planner.parameters)
        fits = True
    except lms.NothingFitsError as error:
        tuned, fits = error.closest, False
    tuned_at = time.perf_counter()
    if tuned.plan is not None:
        rewrite(concrete, analysis, tuned.plan, lms.internal.DeviceCopy())
    rewritten = time.perf_counter()
    return {
        "case": f"{workload} {resolution}px b{batch} {precision}",
        "ops": len(analysis.ops),
        "trace": traced - started,
        "analysis": analysed - traced,
        "tune": tuned_at - analysed,
        "simulations": tuned.simulations,
        "rewrite": rewritten - tuned_at,
        "swaps": tuned.plan.swap_count if tuned.plan else 0,
        "fits": fits,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-memory", default="16GiB")
    args = parser.parse_args()
    from tabulate import tabulate

    rows = []
    for case in CASES:
        r = measure(*case, args.device_memory)
        rows.append(
            [
                r["case"],
                r["ops"],
                f"{r['trace']:.1f}",
                f"{r['analysis']:.2f}",
                f"{r['rewrite']:.2f}",
                f"{r['analysis'] + r['rewrite']:.2f}",
                f"{r['tune']:.2f}",
                r["simulations"],
                r["swaps"],
                r["fits"],
            ]
        )
        print(f"{r['case']}: done", flush=True)
    print(
        tabulate(
            rows,
            [
                "case",
                "ops",
                "trace s",
                "analysis s",
                "rewrite s",
                "analysis+rewrite s",
                "tune s",
                "simulations",
                "swaps",
                f"fits {args.device_memory}",
            ],
            tablefmt="github",
        )
    )
    worst = max(rows, key=lambda row: row[1])
    print(
        f"largest graph ({worst[0]}, {worst[1]} ops): analysis + rewrite {worst[5]} s "
        f"(goal <= 2), auto-tune {worst[6]} s (goal <= 5)"
    )


if __name__ == "__main__":
    main()
