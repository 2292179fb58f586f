"""Check the promises of `lms` on models it was not tuned on, each measurement in a fresh process.

1. A plan that says it fits measures at or under its budget: for each case, LMS plans for
   `device_memory` = `--fraction` x the measured peak without LMS (default safety ratio), and the
   rewritten step's allocator peak is measured over `--steps` steps; repeated in `--runs` fresh
   processes, since the executor's op order (and so the peak) varies between them.
2. Host memory is flat: `--host-steps` steps (default 1,000) of the rewritten step at the case's
   size; the process's RSS after 100 steps and at the end, and what the host store holds; the
   same for the plain step in its own process (TensorFlow's own growth, the baseline).

    python benchmarks/lms_promises.py [--case NAME ...] [--runs 3] [--host-steps 1000]

Cases: benchmarks/lms_emulated.py's (the suite's four workloads at smoke sizes, keras.applications
models with weights=None, a Transformer written there).
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lms_emulated import CASES, build_case, measure, run_json_child  # noqa: E402


def _peak(function, images, labels, steps: int) -> int:
    return measure(function, images, labels, steps)[0]


def budget_child(case: str, fraction: float, steps: int, ordering: int) -> dict:
    import keras

    import lms

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    plain = _peak(step, images, labels, steps)
    device_memory = int(plain * fraction)
    planner = lms.LMS(device_memory=device_memory, ordering=ordering)
    wrapped = planner.wrap(step)
    try:
        wrapped.prepare(images, labels)
    except lms.NothingFitsError as error:
        return {"case": case, "plain": plain, "device_memory": device_memory, "refused": str(error)}
    measured = _peak(wrapped, images, labels, steps)
    report = planner.report
    return {
        "case": case,
        "plain": plain,
        "device_memory": device_memory,
        "budget": report["budget_bytes"],
        "simulated": report["peak_bytes_with_lms"],
        "simulated_plain": report["peak_bytes_without_lms"],
        "measured": measured,
        "swapped": report["swapped_tensors"],
        "lms_needed": report["lms_needed"],
        "ordering": report["parameters"]["ordering"],
    }


def host_child(case: str, fraction: float, steps: int, ordering: int, plain: bool = False) -> dict:
    """RSS after 100 steps and at the end, with LMS or (`plain`) without: the baseline growth
    TensorFlow itself shows over as many steps."""
    import keras
    import psutil
    import tensorflow as tf

    import lms

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    float(step(images, labels))
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    planner = lms.LMS(device_memory=int(peak * fraction), safety_ratio=1.0, ordering=ordering)
    wrapped = step if plain else planner.wrap(step)
    process = psutil.Process()
    rss, started = {}, time.perf_counter()
    for index in range(1, steps + 1):
        float(wrapped(images, labels))
        if index in (100, steps):
            rss[index] = process.memory_info().rss
    return {
        "case": case,
        "steps": steps,
        "swapped": 0 if plain else planner.report["swapped_tensors"],
        "rss_100": rss.get(100),
        "rss_end": rss[steps],
        "store_bytes": planner.store.held_bytes if planner.store else 0,
        "seconds": time.perf_counter() - started,
    }


def _run_child(mode: str, case: str, args, plain: bool = False) -> dict | None:
    arguments = [f"--{mode}", case, "--fraction", str(args.fraction)]
    arguments += ["--ordering", str(args.ordering)]
    arguments += ["--steps", str(args.steps if mode == "budget-child" else args.host_steps)]
    arguments += ["--plain"] if plain else []
    return run_json_child(__file__, arguments, f"{case}: {mode}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--host-steps", type=int, default=1000)
    parser.add_argument("--ordering", type=int, default=-1, choices=(-1, 0, 1))
    parser.add_argument("--budget-child", help=argparse.SUPPRESS)
    parser.add_argument("--host-child", help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.budget_child:
        print(json.dumps(budget_child(args.budget_child, args.fraction, args.steps, args.ordering)))
        return
    if args.host_child:
        result = host_child(args.host_child, args.fraction, args.steps, args.ordering, args.plain)
        print(json.dumps(result))
        return
    from tabulate import tabulate

    mib = 2**20
    rows, worst = [], 0.0
    cases = args.case or list(CASES)
    for number, case in enumerate(cases, 1):
        runs = [_run_child("budget-child", case, args) for _ in range(args.runs)]
        runs = [r for r in runs if r]
        host = _run_child("host-child", case, args) if args.host_steps else None
        baseline = _run_child("host-child", case, args, plain=True) if args.host_steps else None
        if not runs:
            continue
        refused = [r for r in runs if "refused" in r]
        runs = [r for r in runs if "refused" not in r] or refused
        first = runs[0]
        if "refused" in first:
            rows.append(
                [case, f"{first['plain'] / mib:.0f}", f"{first['device_memory'] / mib:.0f}"]
                + ["refused"] * 4
                + [""] * 4
            )
            continue
        ratios = [r["measured"] / r["budget"] for r in runs]
        worst = max(worst, *(r["measured"] / r["device_memory"] for r in runs))
        growth, plain_growth = (
            (h["rss_end"] - h["rss_100"]) / mib if h and h["rss_100"] else None
            for h in (host, baseline)
        )
        rows.append(
            [
                case,
                f"{first['plain'] / mib:.0f}",
                f"{first['device_memory'] / mib:.0f}",
                f"{first['budget'] / mib:.0f}",
                f"{first['simulated'] / mib:.0f}",
                " / ".join(f"{r['measured'] / mib:.0f}" for r in runs),
                f"{max(ratios):.2f} (median {statistics.median(ratios):.2f})",
                f"{first['swapped']} (ordering {first['ordering']})"
                + (f", refused in {len(refused)} runs" if refused else ""),
                f"{growth:+.1f}" if growth is not None else "",
                f"{plain_growth:+.1f}" if plain_growth is not None else "",
                f"{host['store_bytes']}" if host else "",
            ]
        )
        print(f"case {number} of {len(cases)} ({case}) done", flush=True)
    print(
        tabulate(
            rows,
            [
                "case",
                "plain MiB",
                "device MiB",
                "budget MiB",
                "sim MiB",
                "measured MiB (runs)",
                "measured/budget max",
                "swapped",
                f"RSS growth MiB (100→{args.host_steps})",
                "same, plain",
                "store bytes",
            ],
            tablefmt="github",
        )
    )
    print(f"worst measured / device_memory: {worst:.2f}")


if __name__ == "__main__":
    main()
