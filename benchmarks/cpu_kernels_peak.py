"""Benchmark: measured vs simulated peak with oneDNN's and with Eigen's CPU kernels.

The aarch64 image under qemu computes with Eigen's kernels (TensorFlow enables oneDNN on some
Arm CPUs only); its peaks were well above x86_64's for the same trial. This reproduces the
difference natively: smoke-emulated's throughput configuration (GoogLeNet 96x96, batch 2, LMS off
and everything swapped) in fresh trial processes with TF_ENABLE_ONEDNN_OPTS=1 and =0, under a
1 GiB budget (so nothing is cut off), interleaved over `--rounds`. Prints each trial's measured
peak and, for LMS on, the simulator's; then per kernel library the median measured / simulated.

    python benchmarks/cpu_kernels_peak.py [--rounds 2]
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.running.trial import run_trial  # noqa: E402
from suite.specs.loader import load_spec  # noqa: E402

MIB = 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spec = load_spec("smoke-emulated")
    trials = [t for t in spec.trials if t.study == "googlenet-throughput"]
    ratios = {"oneDNN": [], "Eigen": []}
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            for kernels, flag in (("oneDNN", "1"), ("Eigen", "0")):
                for trial in trials:
                    params = trial.params.replace(memory_budget_bytes=2**30)
                    lms = bool(params.lms)
                    log = Path(logs, f"{round_}-{kernels}-{lms}.log")
                    result = run_trial(params, 1800, log, {"TF_ENABLE_ONEDNN_OPTS": flag})
                    if result.outcome != "ok":
                        print(f"{kernels:6} LMS {'on ' if lms else 'off'}: {result.outcome}")
                        continue
                    measured = result.metrics["peak_memory_bytes"]
                    mode = "on " if lms else "off"
                    line = f"{kernels:6} LMS {mode}: measured {measured / MIB:6.1f} MiB"
                    if lms:
                        simulated = result.metrics["lms"]["peak_bytes_with_lms"]
                        ratios[kernels].append(measured / simulated)
                        line += (
                            f", simulated {simulated / MIB:6.1f} MiB ({measured / simulated:.2f}x)"
                        )
                    print(f"round {round_ + 1}/{args.rounds} {line}", flush=True)
    for kernels, values in ratios.items():
        if values:
            print(
                f"{kernels}: measured / simulated with LMS, "
                f"median {statistics.median(values):.2f}x "
                f"(min {min(values):.2f}, max {max(values):.2f}, {len(values)} processes)"
            )


if __name__ == "__main__":
    main()
