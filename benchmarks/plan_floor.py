"""How near the swap-only floor LMS plans, and what planning costs (issue 43), each case in a
fresh process, without running a step (the simulation only: `benchmarks/lms_promises.py`
measures).

Per case: the floor (the largest op's own buffers and kernel temporary, plus the resident
variables and inputs: no swap plan gets under it), the plan nearest the floor (every swappable
tensor swapped, in the enforced order), and for budgets of `--fractions` x the simulated plain
peak, what `LMS.plan_only` keeps (emulated device, default safety ratio): its simulated peak,
plan / floor, whether it split, and analysis + tuning / trace time.

    python benchmarks/plan_floor.py [--case NAME ...] [--fractions 0.6 0.4] [--output runs.json]
    TF_ENABLE_ONEDNN_OPTS=0 python benchmarks/plan_floor.py     # Eigen's kernels

Cases: benchmarks/lms_emulated.py's (the suite's four workloads at smoke sizes, outside models).
The suite's workloads at GPU sizes are planned by `inv plan` (docs/lms.md).
"""

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lms_emulated import CASES, build_case, run_json_child  # noqa: E402

DEFAULT_CASES = (
    "googlenet", "deeplabv3plus", "resnet50", "unet3d", "wavenet", "fanout", "gru", "c3d",
    "mixer", "transformer", "unet2d", "vit", "lstm", "densenet121", "mobilenetv2",
)  # fmt: skip
MiB = 2**20


def child(case: str, fractions: list) -> dict:
    import keras
    import tensorflow as tf

    import lms
    from lms.memory.lifetimes import largest_footprint

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    concrete = step.get_concrete_function(images, labels)
    analysis = lms.internal.analyze(concrete.graph, paired_reads=lms.internal.cpu_paired_reads())
    plain = lms.internal.simulate(analysis).peak_bytes
    floor = largest_footprint(analysis).bytes + analysis.resident_bytes
    nearest = lms.internal.simulate(
        analysis, lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=1))
    ).peak_bytes
    specs = [tf.TensorSpec.from_tensor(images), tf.TensorSpec.from_tensor(labels)]
    budgets = []
    for fraction in fractions:
        planner = lms.LMS(device_memory=int(plain * fraction))
        try:
            report = planner.plan_only(tf.function(step.python_function), *specs)
        except lms.NothingFitsError as error:
            budgets.append({"fraction": fraction, "refused": str(error)[:300]})
            continue
        timings = report.timings_s
        budgets.append(
            {
                "fraction": fraction,
                "budget": report.budget_bytes,
                "planned": report.planned_budget_bytes,
                "peak": report.peak_bytes_with_lms,
                "fits": report.fits,
                "splits": len(report.splits),
                "swapped_bytes": report.swapped_bytes,
                "parameters": report.parameters,
                "planning_ratio": (timings["analysis_s"] + timings["tune_s"])
                / max(timings["trace_s"], 1e-9),
                "timings": timings,
            }
        )
    return {
        "case": case,
        "kernels": analysis.kernels,
        "plain": plain,
        "floor": floor,
        "nearest": nearest,
        "budgets": budgets,
    }


def print_table(results: list) -> None:
    from tabulate import tabulate

    rows = []
    for r in results:
        for b in r["budgets"]:
            if "refused" in b:
                rows.append([r["case"], r["kernels"], b["fraction"], "", "", "refused", "", ""])
                continue
            below = r["floor"] <= b["planned"]
            rows.append(
                [
                    r["case"],
                    r["kernels"],
                    b["fraction"],
                    f"{r['plain'] / MiB:.0f}",
                    f"{r['floor'] / MiB:.1f}",
                    f"{b['peak'] / MiB:.1f} / {b['planned'] / MiB:.1f}"
                    + (f" split {b['splits']}" if b["splits"] else ""),
                    f"{b['peak'] / r['floor']:.2f}" if below else "floor over budget",
                    f"{r['nearest'] / r['floor']:.2f}",
                    f"{b['planning_ratio']:.2f}",
                ]
            )
    headers = [
        "case", "kernels", "fraction", "plain MiB", "floor MiB", "plan / planned budget MiB",
        "plan / floor", "nearest / floor", "(analysis+tune) / trace",
    ]  # fmt: skip
    print(tabulate(rows, headers=headers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", nargs="*", default=list(DEFAULT_CASES))
    parser.add_argument("--fractions", nargs="*", type=float, default=[0.6, 0.4])
    parser.add_argument("--output")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--tables", help="print the table again from a saved --output")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.fractions)))
        return
    if args.tables:
        print_table(json.loads(Path(args.tables).read_text()))
        return
    results = []
    for k, case in enumerate(args.case, 1):
        print(f"case {k} of {len(args.case)}: {case}", flush=True)
        fractions = [str(f) for f in args.fractions]
        found = run_json_child(__file__, ["--child", case, "--fractions", *fractions], case)
        if found:
            results.append(found)
            if args.output:
                Path(args.output).write_text(json.dumps(results, indent=1))
    print_table(results)


if __name__ == "__main__":
    main()
