"""The spread of a trial's measured peak over fresh processes, and where a test's memory budget
can sit between two sizes (tests/test_limits.py chose 232 MiB from this).

Runs one-step trials (no budget) round-robin over the resolutions, `--runs` times each, and
prints per resolution the min / median / max peak in MiB, then for each pair of neighbours the
budget midway between the smaller one's max and the larger one's min, with its margins.

    python benchmarks/peak_spread.py [--workload googlenet] [--batch 8] \
        [--resolutions 160,208] [--runs 15]
"""

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suite.running.trial import run_trial  # noqa: E402
from suite.specs import parse_spec  # noqa: E402

SPEC = """
name = "peaks"
[defaults]
steps = 1
warmup_steps = 1
[[study]]
name = "peaks"
kind = "throughput"
workload = "{workload}"
resolution = {resolution}
batch = {batch}
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="googlenet")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--resolutions", default="160,208")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    resolutions = [int(r) for r in args.resolutions.split(",")]
    peaks = {r: [] for r in resolutions}
    with tempfile.TemporaryDirectory() as scratch:
        for run in range(args.runs):
            for resolution in resolutions:
                text = SPEC.format(workload=args.workload, resolution=resolution, batch=args.batch)
                params = parse_spec(text, "peaks.toml").trials[0].params
                result = run_trial(params, 900, Path(scratch, "trial.log"))
                if result.outcome != "ok":
                    sys.exit(f"{resolution}px: {result.outcome}: {result.error}")
                peaks[resolution].append(result.metrics.peak_memory_bytes / 2**20)
                print(
                    f"run {run + 1}/{args.runs} {resolution}px: {peaks[resolution][-1]:.1f} MiB",
                    file=sys.stderr,
                    flush=True,
                )
    print(f"{args.workload} batch {args.batch}, {args.runs} processes per size (MiB):")
    for resolution, values in peaks.items():
        print(
            f"  {resolution}px: min {min(values):.1f}  median {statistics.median(values):.1f}  "
            f"max {max(values):.1f}"
        )
    for low, high in zip(resolutions, resolutions[1:], strict=False):
        top, bottom = max(peaks[low]), min(peaks[high])
        middle = (top + bottom) / 2
        print(
            f"  between {low}px and {high}px: budget {middle:.0f} MiB leaves {middle - top:.1f} "
            f"MiB above {low}px and {bottom - middle:.1f} MiB below {high}px"
        )


if __name__ == "__main__":
    main()
