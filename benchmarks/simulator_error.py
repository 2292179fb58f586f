"""Simulator error against the emulated device's measured peak, with and without allocator model.

For each case of benchmarks/lms_emulated.py and each mode (the plain step; everything swappable
swapped in the enforced order; the same in TensorFlow's order), a fresh process measures the
allocator's peak over two steps after a first one and simulates the same step with the bytes asked
and with the allocator model (lms/memory/allocator.py, lms/memory/padding.py). Prints the errors in
% of the measured peak and their medians. One process per cell: the plain peak alone varies by up to
~8 % between processes (TensorFlow's order); run it more than once to see that spread.

    python benchmarks/simulator_error.py [--case NAME ...]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lms_emulated import CASES, build_case, measure  # noqa: E402

MODES = (("plain", 0), ("all", 1), ("all", 0))


def child(case: str, mode: str, ordering: int) -> dict:
    import keras
    import tensorflow as tf

    import lms
    from lms.device.rewriter import rewrite

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    concrete = tf.function(step.python_function).get_concrete_function(images, labels)
    analysis = lms.internal.analyze(
        concrete.graph, quiet=True, paired_reads=lms.internal.cpu_paired_reads()
    )
    plan, function = None, step
    if mode == "all":
        plan = lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=ordering))
        function = rewrite(concrete, analysis, plan, lms.internal.HostStore())
    measured, _ = measure(function, images, labels, 2)
    asked = lms.internal.simulate(analysis, plan).peak_bytes
    padded = lms.internal.simulate(analysis, plan, lms.internal.BestFitAllocator).peak_bytes
    return {"measured": measured, "asked": asked, "padded": padded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        case, mode, ordering = args.child
        print(json.dumps(child(case, mode, int(ordering))))
        return
    from tabulate import tabulate

    from suite.environment import TRIAL_ENVIRONMENT

    env = {**os.environ, **TRIAL_ENVIRONMENT, "PYTHONPATH": str(ROOT)}
    rows, errors = [], {"asked": [], "padded": []}
    cases = args.case or list(CASES)
    for number, case in enumerate(cases, 1):
        row = [case]
        for mode, ordering in MODES:
            command = [sys.executable, __file__, "--child", case, mode, str(ordering)]
            done = subprocess.run(command, capture_output=True, text=True, env=env)
            if done.returncode != 0:
                row.append("failed")
                print(f"{case} {mode} {ordering}: failed\n{done.stderr[-1500:]}", flush=True)
                continue
            result = json.loads(done.stdout.strip().splitlines()[-1])
            cell = []
            for key in ("asked", "padded"):
                error = (result[key] - result["measured"]) / result["measured"] * 100
                errors[key].append(abs(error))
                cell.append(f"{error:+.1f}")
            row.append(" -> ".join(cell))
        rows.append(row)
        print(f"case {number} of {len(cases)} ({case}) done", flush=True)
    headers = ["case", "plain", "all swapped, enforced order", "all swapped, TF's order"]
    print(tabulate(rows, headers, tablefmt="github"))
    for key, values in errors.items():
        if values:
            median = statistics.median(values)
            print(f"|error| {key}: median {median:.1f} %, max {max(values):.1f} %")


if __name__ == "__main__":
    main()
