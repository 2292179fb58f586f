"""What pruning a tuned plan drops (lms/tuning/prune.py, issue 43), without running a step: per
case, in one process, the plan auto-tuned for `--fractions` x the simulated plain peak x 0.8 (the
default safety ratio), without pruning and with it (the host store's transfer cost), and pruned
only up to the tuned plan's own peak: swaps and transfer milliseconds a step of each.

    python benchmarks/plan_pruning.py [--case NAME ...] [--fractions 0.6 0.4]

Cases: benchmarks/lms_emulated.py's.
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from lms_emulated import CASES, build_case  # noqa: E402

DEFAULT_CASES = ("mixer", "wavenet", "transformer", "resnet50")
SAFETY = 0.8


def rows(case: str, fractions: list) -> list:
    import keras

    import lms
    from lms.device.host_store import HOST_STORE_COST
    from lms.tuning.prune import prune, transfer_seconds

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    graph = step.get_concrete_function(images, labels).graph
    analysis = lms.internal.analyze(graph, paired_reads=lms.internal.cpu_paired_reads())
    plain = lms.internal.simulate(analysis).peak_bytes
    found = []
    for fraction in fractions:
        budget = int(plain * fraction * SAFETY)
        try:
            tuned = lms.internal.tune(analysis, budget, lms.Parameters())
        except lms.NothingFitsError:
            found.append([case, fraction, "refused", "", ""])
            continue

        def cell(plan):
            ms = 1e3 * transfer_seconds(analysis, plan, HOST_STORE_COST)
            return f"{plan.swap_count} swaps, {ms:.0f} ms"

        to_budget = prune(analysis, tuned.plan, tuned.simulation, budget, HOST_STORE_COST)
        own_peak = tuned.simulation.peak_bytes
        to_peak = prune(analysis, tuned.plan, tuned.simulation, own_peak, HOST_STORE_COST)
        found.append([case, fraction, cell(tuned.plan), cell(to_budget.plan), cell(to_peak.plan)])
    return found


def main() -> None:
    from tabulate import tabulate

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--fractions", nargs="*", type=float, default=[0.6, 0.4])
    args = parser.parse_args()
    table = []
    for case in args.case or DEFAULT_CASES:
        table += rows(case, args.fractions)
        print(f"{case}: done", flush=True)
    headers = ["case", "fraction", "tuned", "pruned (to the budget)", "pruned (to its own peak)"]
    print(tabulate(table, headers, tablefmt="github"))


if __name__ == "__main__":
    main()
