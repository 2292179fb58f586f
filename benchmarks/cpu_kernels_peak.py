"""Benchmark: measured vs simulated peak with oneDNN's and with Eigen's CPU kernels.

The aarch64 image under qemu computes with Eigen's kernels (TensorFlow enables oneDNN on some
Arm CPUs only); its peaks were well above x86_64's for the same trial. This reproduces the
difference natively: smoke-emulated's throughput configuration (GoogLeNet 96x96, batch 2, LMS off
and everything swapped) in fresh trial processes with TF_ENABLE_ONEDNN_OPTS=1 and =0, under a
1 GiB budget (so nothing is cut off), interleaved over `--rounds`. LMS plans with the kernel set
the process computes with (lms/graph/kernels.py). Prints each trial's measured peak and the
simulated one (LMS on: the plan's; LMS off: the same trial's simulation without LMS), the
simulator's error in % of the measured peak, then per kernel set the median error.

Before lms/graph/kernels.py modelled Eigen's temporaries, Eigen's measured / simulated was
1.85-1.90x with LMS (oneDNN's 1.07-1.08x). With them (two rounds): Eigen LMS off +2.8 and +4.1 %, on
+9.2 and -1.1 %; oneDNN off -10.0 and -12.7 %, on -6.6 and -9.2 %.

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
KERNELS = (("oneDNN", "1"), ("Eigen", "0"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spec = load_spec("smoke-emulated")
    trials = [t for t in spec.trials if t.study == "googlenet-throughput"]
    trials.sort(key=lambda t: bool(t.params.lms))  # LMS off first: its peak pairs with the plan
    errors = {(kernels, mode): [] for kernels, _ in KERNELS for mode in ("off", "on")}
    with tempfile.TemporaryDirectory() as logs:
        for round_ in range(args.rounds):
            for kernels, flag in KERNELS:
                measured = {}
                for trial in trials:
                    params = trial.params.replace(memory_budget_bytes=2**30)
                    mode = "on" if params.lms else "off"
                    log = Path(logs, f"{round_}-{kernels}-{mode}.log")
                    result = run_trial(params, 1800, log, {"TF_ENABLE_ONEDNN_OPTS": flag})
                    if result.outcome != "ok":
                        print(f"{kernels:6} LMS {mode:3}: {result.outcome}", flush=True)
                        continue
                    measured[mode] = result.metrics.peak_memory_bytes
                    if mode != "on":
                        continue
                    report = result.metrics.lms_plan
                    simulated = {"on": report.peak_bytes_with_lms}
                    simulated["off"] = report.peak_bytes_without_lms
                    for shown in ("off", "on"):
                        if shown not in measured:
                            continue
                        error = (simulated[shown] - measured[shown]) / measured[shown] * 100
                        errors[(kernels, shown)].append(error)
                        print(
                            f"round {round_ + 1}/{args.rounds} {kernels:6} LMS {shown:3}: "
                            f"measured {measured[shown] / MIB:6.1f} MiB, simulated "
                            f"{simulated[shown] / MIB:6.1f} MiB ({error:+.1f} %)",
                            flush=True,
                        )
    for (kernels, mode), values in errors.items():
        if values:
            median = statistics.median(values)
            print(
                f"{kernels}, LMS {mode}: simulated - measured, median {median:+.1f} % of the "
                f"measured peak (min {min(values):+.1f}, max {max(values):+.1f}, "
                f"{len(values)} processes)"
            )


if __name__ == "__main__":
    main()
