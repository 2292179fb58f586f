"""Check the promises of `lms` on models it was not tuned on, each measurement in a fresh process.

1. The closed loop keeps the measured peak under the device memory: for each case, kernel set
   (oneDNN's and Eigen's CPU kernels, by TF_ENABLE_ONEDNN_OPTS) and process, LMS plans for
   `device_memory` = `--fraction` x the measured peak without LMS, runs until its loop has
   accepted a plan (or refused with NothingFitsError), then measures `--steps` more steps one by
   one. Printed per run: measured / device memory and the corrections the loop needed; the runs
   go in rounds (every case and kernel set once per round), since the executor's op order (and
   so the peak) varies between processes.
2. Host memory is flat (`--host-steps N`, off by default): N steps of the rewritten step; the
   process's RSS after 100 steps and at the end, and what the host store holds; the same for the
   plain step in its own process (TensorFlow's own growth, the baseline).

    python benchmarks/lms_promises.py [--case NAME ...] [--runs 3] [--safety 0.8]
        [--kernels both|oneDNN|Eigen] [--output runs.json] [--host-steps 1000]
    python benchmarks/lms_promises.py --tables runs.json    # the tables again, from the runs

3. The simulator's error, for the record: simulated / measured peak of the plain step and of the
   plan the loop accepted, median and furthest from 1 per case and kernel set, beside the
   between-process spread of each measured peak.

Cases: benchmarks/lms_emulated.py's (the suite's four workloads at smoke sizes, keras.applications
models with weights=None, and models written there: Transformer, ViT, an encoder-decoder
Transformer, a 2D U-Net, stacked LSTMs).
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


def budget_child(
    case: str, fraction: float, steps: int, ordering: int, safety: float, max_steps: int = 24
) -> dict:
    """One fresh process: the plain step's peak, then LMS at `fraction` of it with the closed
    loop on; steps run until the loop has accepted a plan (at most `max_steps`), then `steps`
    more, each measured on its own. The promise: no step after the loop's acceptance measures
    over the device memory."""
    import keras
    import tensorflow as tf

    import lms
    from lms import _tf_private

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    plain = _peak(step, images, labels, steps)
    device_memory = int(plain * fraction)
    planner = lms.LMS(device_memory=device_memory, ordering=ordering, safety_ratio=safety)
    wrapped = planner.wrap(step)
    result = {
        "case": case,
        "kernels": "oneDNN" if _tf_private.onednn_enabled() else "Eigen",
        "plain": plain,
        "device_memory": device_memory,
    }
    started, calls = time.perf_counter(), 0
    try:
        while calls < max_steps and (wrapped.calibrating or not calls):
            float(wrapped(images, labels))
            calls += 1
        peaks = []
        for _ in range(steps):
            tf.config.experimental.reset_memory_stats("CPU:0")
            float(wrapped(images, labels))
            peaks.append(tf.config.experimental.get_memory_info("CPU:0")["peak"])
    except lms.NothingFitsError as error:
        result["refused"] = str(error)
        peaks = []
    report = planner.report.to_dict() if planner.report else {}
    calibration = report.get("calibration") or {}
    result.update(
        {
            "seconds": time.perf_counter() - started,
            "budget": planner.budget,
            "simulated": report.get("peak_bytes_with_lms"),
            "simulated_plain": report.get("peak_bytes_without_lms"),
            "measured": max(peaks) if peaks else None,
            "peaks": peaks,
            "accepted": calibration.get("accepted"),
            "corrections": calibration.get("corrections"),
            "attempts": calibration.get("attempts"),
            "calls_to_accept": calls,
            "swapped": report.get("swapped_tensors"),
            "lms_needed": report.get("lms_needed"),
            "ordering": (report.get("parameters") or {}).get("ordering"),
        }
    )
    return result


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
        "swapped": 0 if plain else planner.report.swapped_tensors,
        "rss_100": rss.get(100),
        "rss_end": rss[steps],
        "store_bytes": planner.store.held_bytes if planner.store else 0,
        "seconds": time.perf_counter() - started,
    }


KERNEL_ENV = {"oneDNN": "1", "Eigen": "0"}  # TF_ENABLE_ONEDNN_OPTS per CPU kernel set


def _run_child(mode: str, case: str, args, plain: bool = False, kernels=None) -> dict | None:
    arguments = [f"--{mode}", case, "--fraction", str(args.fraction)]
    arguments += ["--ordering", str(args.ordering), "--safety", str(args.safety)]
    arguments += ["--steps", str(args.steps if mode == "budget-child" else args.host_steps)]
    arguments += ["--plain"] if plain else []
    env = {"TF_ENABLE_ONEDNN_OPTS": KERNEL_ENV[kernels]} if kernels else None
    return run_json_child(__file__, arguments, f"{case}: {mode}", env)


def _mib(value) -> str:
    return "" if value is None else f"{value / 2**20:.0f}"


def promises_table(results: list) -> tuple[list, list]:
    """Rows per model x kernel set x process: measured / device memory after the loop, and how
    many corrections it took; plus the runs whose promise failed (a step over the device)."""
    rows, broken = [], []
    for r in results:
        ratio = r["measured"] / r["device_memory"] if r.get("measured") else None
        if ratio is not None and ratio > 1:
            broken.append(r)
        outcome = "refused" if "refused" in r else ("held" if r.get("accepted") else "measuring")
        rows.append(
            [
                r["case"],
                r["kernels"],
                r["run"],
                _mib(r["plain"]),
                _mib(r["device_memory"]),
                _mib(r.get("simulated")),
                " / ".join(_mib(p) for p in r.get("peaks") or []),
                f"{ratio:.3f}" if ratio is not None else "",
                r.get("corrections"),
                outcome,
                f"{r.get('seconds', 0):.0f}",
            ]
        )
    return rows, broken


def _spread(values: list) -> str:
    """(max - min) / median of the measured peaks over processes."""
    return f"{(max(values) - min(values)) / statistics.median(values):.1%}" if values else ""


def simulator_error_table(results: list) -> tuple[list, dict]:
    """Per case x kernel set: simulated / measured peak (median and max over processes) of the
    plain step and of the plan the loop accepted, beside the between-process spread of each
    measured peak; plus the medians and maxima over all cells. For the record: the loop, not the
    simulator, carries the promise."""
    cells: dict = {}
    for r in results:
        cells.setdefault((r["case"], r["kernels"]), []).append(r)
    rows, plain_errors, plan_errors = [], [], []
    for (case, kernels), runs in cells.items():
        plain = [r["simulated_plain"] / r["plain"] for r in runs if r.get("simulated_plain")]
        plan = [r["simulated"] / r["measured"] for r in runs if r.get("measured")]
        plain_errors += plain
        plan_errors += plan
        rows.append(
            [
                case,
                kernels,
                len(runs),
                f"{statistics.median(plain):.3f}" if plain else "",
                f"{max(plain, key=lambda x: abs(x - 1)):.3f}" if plain else "",
                _spread([r["plain"] for r in runs]),
                f"{statistics.median(plan):.3f}" if plan else "",
                f"{max(plan, key=lambda x: abs(x - 1)):.3f}" if plan else "",
                _spread([r["measured"] for r in runs if r.get("measured")]),
            ]
        )
    summary = {
        name: (statistics.median(errors), max(errors, key=lambda x: abs(x - 1)))
        for name, errors in (("plain", plain_errors), ("plan", plan_errors))
        if errors
    }
    return rows, summary


def print_tables(results: list) -> None:
    from tabulate import tabulate

    rows, broken = promises_table(results)
    headers = [
        "case",
        "kernels",
        "process",
        "plain MiB",
        "device MiB",
        "sim MiB",
        "measured MiB (steps)",
        "measured / device",
        "corrections",
        "loop",
        "s",
    ]
    print(tabulate(rows, headers, tablefmt="github"))
    ratios = [r["measured"] / r["device_memory"] for r in results if r.get("measured")]
    if ratios:
        print(
            f"worst measured / device memory: {max(ratios):.3f}; runs over the device: "
            f"{len(broken)} of {len(ratios)} measured; refused: "
            f"{sum('refused' in r for r in results)}"
        )
    rows, summary = simulator_error_table(results)
    headers = [
        "case",
        "kernels",
        "processes",
        "plain sim/meas median",
        "worst",
        "plain spread",
        "plan sim/meas median",
        "worst",
        "plan spread",
    ]
    print(tabulate(rows, headers, tablefmt="github"))
    for name, (median, worst) in summary.items():
        print(f"simulated / measured, {name}: median {median:.3f}, furthest from 1 {worst:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--fraction", type=float, default=0.6)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--safety", type=float, default=0.8, help="LMS safety_ratio")
    parser.add_argument("--kernels", choices=("both", "oneDNN", "Eigen"), default="both")
    parser.add_argument("--host-steps", type=int, default=0)
    parser.add_argument("--ordering", type=int, default=-1, choices=(-1, 0, 1))
    parser.add_argument("--output", help="also write the per-run results as JSON here")
    parser.add_argument("--tables", help="only print the tables of an --output file")
    parser.add_argument("--budget-child", help=argparse.SUPPRESS)
    parser.add_argument("--host-child", help=argparse.SUPPRESS)
    parser.add_argument("--plain", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.budget_child:
        result = budget_child(
            args.budget_child, args.fraction, args.steps, args.ordering, args.safety
        )
        print(json.dumps(result))
        return
    if args.host_child:
        result = host_child(args.host_child, args.fraction, args.steps, args.ordering, args.plain)
        print(json.dumps(result))
        return
    from tabulate import tabulate

    if args.tables:  # the tables of runs written before by --output
        print_tables(json.loads(Path(args.tables).read_text()))
        return
    kernel_sets = ("oneDNN", "Eigen") if args.kernels == "both" else (args.kernels,)
    cases = args.case or list(CASES)
    results, total, done = [], len(cases) * len(kernel_sets) * args.runs, 0
    for run in range(args.runs):  # rounds: every case and kernel set once per round
        for case in cases:
            for kernels in kernel_sets:
                done += 1
                result = _run_child("budget-child", case, args, kernels=kernels)
                print(f"run {done} of {total}: {case}, {kernels}, process {run + 1}", flush=True)
                if result:
                    results.append({**result, "run": run + 1})
                if args.output:  # after every run: an interrupted campaign keeps what it measured
                    Path(args.output).write_text(json.dumps(results, indent=1))
    print_tables(results)
    if args.host_steps:
        host_rows = []
        for case in cases:
            host = _run_child("host-child", case, args)
            baseline = _run_child("host-child", case, args, plain=True)
            growth = [
                (h["rss_end"] - h["rss_100"]) / 2**20 if h and h["rss_100"] else None
                for h in (host, baseline)
            ]
            host_rows.append([case, *growth, host["store_bytes"] if host else None])
        print(
            tabulate(
                host_rows,
                ["case", f"RSS growth MiB (100->{args.host_steps})", "same, plain", "store bytes"],
                tablefmt="github",
            )
        )


if __name__ == "__main__":
    main()
