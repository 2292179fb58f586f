"""Benchmark: limit searches on the emulated device — trials per search, and how far LMS pushes.

For each smoke workload, a max-resolution search (batch fixed) and for GoogLeNet also a max-batch
search, each with LMS off and LMS on under the same memory budget, run as real trials (the suite's
own `run_spec`, results kept in --results so a rerun resumes). Prints per search: the limits,
the gain in pixels (voxels for 3D) or samples, the real trials each search needed against the
trials that stepping +1 candidate at a time from the start would need (the seeds' method), the
data rate at each limit, and what stopped LMS from going further.

    python benchmarks/limits.py [--results /tmp/lms-limits] [--workload NAME ...]
        [--safety-ratio 0.8] [--reach]

--reach runs the seeds' question instead (issue 11, item 2): budgets at which the resident
variables (weights and optimizer state) are at most 10 % of the device, so that activations
decide as on a 16-32 GB GPU; the goal is >= 10x the pixels without LMS for GoogLeNet and ResNet50
and >= 5x the voxels for the 3D U-Net. Hours on 2 cores, and the host store holds what is swapped
(ResNet50 at 3200^2 b1: ~16 GiB of host memory): not for CI.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# workload -> (budget, [(kind, fixed, start, stop, step)]): budgets a few times the resident
# weights and optimizer state, so that activations decide; ranges wide enough for LMS.
CASES = {
    "googlenet": (
        "300MiB",
        [("max-resolution", 2, 64, 1536, 32), ("max-batch", 224, 1, 64, 1)],
    ),
    "resnet50": ("400MiB", [("max-resolution", 1, 64, 1536, 32)]),
    "deeplabv3plus": ("640MiB", [("max-resolution", 1, 64, 1024, 32)]),
    "unet3d": ("400MiB", [("max-resolution", 1, 16, 128, 8)]),
}

# --reach: resident variables <= 10 % of the budget (GoogLeNet 56 MB of weights and momentum,
# ResNet50 205 MB, 3D U-Net 131 MB; printed per search from the LMS plan), ranges to beyond the
# seeds' gains. Steps of 16 px: one step near the bound is ~3 % of the pixels, so that a search can
# show >= 0.95 of the bound (issue 26). The 3D U-Net's sizes are multiples of 8: near its bound
# (~100^3) one step is ~25 % of the voxels, so its limit lands within a step of the bound, not
# within 5 %. DeepLabV3+ (Xception-65: 330 MB of weights and momentum) at 2 GiB is above 10 %
# resident: the most a 2-core machine steps through in hours.
REACH_CASES = {
    "googlenet": ("640MiB", [("max-resolution", 2, 64, 4096, 16)]),
    "resnet50": ("2GiB", [("max-resolution", 1, 64, 4096, 16)]),
    "unet3d": ("1536MiB", [("max-resolution", 1, 16, 256, 8)]),
    "deeplabv3plus": ("2GiB", [("max-resolution", 1, 64, 2048, 16)]),
}


def spec_text(
    workload: str, budget: str, searches: list, safety_ratio: float, timeout: int = 1800
) -> str:
    lines = [
        f'name = "limits-{workload}"',
        "[defaults]",
        "steps = 1",
        "warmup_steps = 1",
        f'memory_budget = "{budget}"',
        f"timeout = {timeout}",
        f"lms = {{ safety_ratio = {safety_ratio} }}",
    ]
    for kind, fixed, start, stop, step in searches:
        fixed_field = "batch" if kind == "max-resolution" else "resolution"
        lines += [
            "[[study]]",
            f'name = "{kind}"',
            f'kind = "{kind}"',
            f'workload = "{workload}"',
            f"{fixed_field} = {fixed}",
            f"start = {start}",
            f"stop = {stop}",
            f"step = {step}",
        ]
    return "\n".join(lines) + "\n"


def stepping_trials(record) -> int:
    """Trials the seeds' +step stepping needs: every candidate up to the first failure."""
    start, stop, step = record.range
    last = record.smallest_failed or stop
    return (last - start) // step + 1


def limited_by(record, trials: list) -> str:
    if record.smallest_failed is None:
        return "stop of the range"
    failed = next(t for t in record.trials if t.value == record.smallest_failed)
    for trial in trials:
        if trial.spec_hash == failed.spec_hash:
            error = (trial.error or trial.outcome).splitlines()[0]
            if "largest operation" in error:
                return "largest op: " + error.split("the largest operation, ")[1][:90]
            return error[:100]
    return failed.outcome


def resident_share(record, trials: list) -> str:
    """Variables (weights, optimizer state) over the budget, from the LMS-on trials' plans."""
    hashes = {t.spec_hash for t in record.trials}
    for trial in trials:
        plan = trial.metrics.lms_plan if trial.metrics else None
        if trial.spec_hash in hashes and plan and plan.analysis:
            budget = trial.metrics.memory_budget_bytes
            return f"{plan.analysis.variable_bytes / budget:.1%}"
    return "?"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default="/tmp/lms-limits")
    parser.add_argument("--workload", action="append", choices=sorted(CASES))
    parser.add_argument("--safety-ratio", type=float, default=0.8)
    parser.add_argument("--reach", action="store_true", help="budgets with weights <= 10 %%")
    parser.add_argument("--budget", help="the memory budget for every workload (e.g. 1GiB)")
    args = parser.parse_args()
    cases = REACH_CASES if args.reach else CASES
    from tabulate import tabulate

    from suite.records import load_trials
    from suite.reporting.limits_table import gain_text, rate_at_limit_text
    from suite.reporting.swap_bound import bound_text, lms_reports
    from suite.running.runner import run_spec
    from suite.specs import parse_spec

    results = Path(args.results)
    rows, counts = [], []
    for workload in args.workload or list(cases):
        if workload not in cases:
            continue
        budget, searches = cases[workload]
        budget = args.budget or budget
        timeout = 7200 if args.reach else 1800  # ResNet50 at 3200^2 steps for minutes here
        text = spec_text(workload, budget, searches, args.safety_ratio, timeout)
        spec = parse_spec(text, f"benchmarks/limits.py:{workload}")
        summary = run_spec(spec, results, host="limits", echo=print)
        by_study = {}
        for record in summary.searches:
            by_study.setdefault(record.spec.study, {})[record.mode] = record
        trials = load_trials(results, "limits")  # this host's, read once
        reports = lms_reports(trials)
        for study, modes in by_study.items():
            off, on = modes["off"], modes["on"]
            for record in (off, on):
                counts.append((len(record.trials), stepping_trials(record)))
            rows.append(
                [
                    workload,
                    f"{study} ({budget})",
                    off.largest_ok,
                    on.largest_ok,
                    gain_text(off, on),
                    bound_text(off, on, reports),
                    f"{len(off.trials)}/{len(on.trials)}",
                    f"{stepping_trials(off)}/{stepping_trials(on)}",
                    rate_at_limit_text(off),
                    rate_at_limit_text(on),
                    limited_by(on, trials),
                    resident_share(on, trials),
                ]
            )
    headers = [
        "workload",
        "search",
        "LMS off",
        "LMS on",
        "gain",
        "swap-only bound",
        "trials off/on",
        "stepping would need",
        "rate at limit off",
        "rate at limit on",
        "LMS on stopped by",
        "variables / budget",
    ]
    print(tabulate(rows, headers, tablefmt="github", disable_numparse=True))
    if counts:
        used = sorted(c[0] for c in counts)
        print(
            f"real trials per search: median {used[len(used) // 2]}, max {used[-1]} (goal <= 5); "
            f"stepping would need {sum(c[1] for c in counts)} in all vs {sum(used)}"
        )


if __name__ == "__main__":
    main()
