"""Does host memory stay flat over many steps with LMS? Each mode runs in a fresh process: the
process's resident memory (psutil) after steps 100, 1,000, ... and what the host store still
holds after the last step, plain training against the same step with everything swapped (the
emulated device's host store), and that step with its convolutions and element-wise ops split
in two along the batch as well (the pieces' host copies, slice reads and assembled outputs go
through the same store). The model has a custom gradient, a depthwise convolution, layer norm
and attention (tests/support/lms_equivalence.py: mixed_block_case).

    python benchmarks/lms_host_memory.py [--steps 4000]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# the ops split in the "lms-split" mode: the model's convolutions, their gradients and its
# element-wise ops (what lms/split/rewrite.py splits along a batch of 2)
SPLIT_TYPES = (
    "Conv2D",
    "Conv2DBackpropInput",
    "Conv2DBackpropFilter",
    "DepthwiseConv2dNative",
    "DepthwiseConv2dNativeBackpropInput",
    "DepthwiseConv2dNativeBackpropFilter",
    "Mul",
    "Sigmoid",
    "AddV2",
)


def measure(mode: str, steps: int) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]
    import lms_equivalence as t
    import psutil

    import lms

    case = t.mixed_block_case()
    planner = t.aggressive()
    if mode == "lms-split":
        planner = lms.LMS(
            device_memory="1TiB",
            swapout_threshold=1,
            swapin_ahead=1,
            swapin_groupby=0,
            split=dict.fromkeys(SPLIT_TYPES, 2),
        )
    step = planner.wrap(case.step) if mode != "plain" else case.step
    process, rss = psutil.Process(), {}
    for index in range(1, steps + 1):
        step(case.images, case.labels)
        if index == 100 or index % 1000 == 0:
            rss[index] = process.memory_info().rss
    held = planner.store.held_bytes if planner.store else 0
    swaps = planner.report.swapped_tensors if planner.report else 0
    splits = len(planner.report.splits or ()) if planner.report else 0
    return {"rss": rss, "held": held, "swaps": swaps, "splits": splits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4000)
    args = parser.parse_args()
    for mode in ("plain", "lms", "lms-split"):
        code = (
            f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from benchmarks.lms_host_memory import measure; "
            f"print(json.dumps(measure({mode!r}, {args.steps})))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{mode}: {done.stderr[-2000:]}")
        result = json.loads(done.stdout.strip().splitlines()[-1])
        rss = {int(k): v / 2**20 for k, v in result["rss"].items()}
        first, last = min(rss), max(rss)
        growth = (rss[last] - rss[first]) / (last - first) * 1000
        points = ", ".join(f"{k}: {v:.1f}" for k, v in sorted(rss.items()))
        print(
            f"{mode}: RSS MiB after step {points}; {growth:+.2f} MiB per 1,000 steps; "
            f"host store after the last step {result['held']} B; {result['swaps']} swaps, "
            f"{result['splits']} ops split"
        )


if __name__ == "__main__":
    main()
