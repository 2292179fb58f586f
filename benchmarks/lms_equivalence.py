"""How close LMS's training step is to plain training, per model, over fresh processes: the share
of the update check's tolerance (tests/support/lms_equivalence.py) that the largest difference
uses, the largest difference relative to a variable's own update (variables above 1e-5 of the
step's update), and the largest noise-only difference (relative to the whole step's update).
Everything swappable is swapped; Grappler's arithmetic optimizer and remapper are off in both
runs, as in the test.

    python benchmarks/lms_equivalence.py [--processes 3] [--case NAME ...]
"""

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    "cnn-fp32",
    "cnn-fp16",
    "googlenet",
    "googlenet-fp16",
    "unet3d",
    "vgg16",
    "deeplabv3plus",
    "resnet50",
    "mobilenetv2",
    "densenet121",
    "mixed-block",
]  # tests/support/lms_equivalence.py's, and one more


def measure(name: str) -> dict:
    """In this process: the rewritten step's one-step updates against plain training's."""
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]
    import lms_equivalence as t
    import numpy as np
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options(t.EXACT_ARITHMETIC)
    make, tolerance = t.EQUIVALENCE_CASES.get(name, (t.mixed_block_case, None))
    case = make()
    rewritten, *_ = t.force_plan(t.aggressive(), case)
    rtol, floor = t.update_tolerance(case, tolerance)
    _, got, _ = t.step_update(case, rewritten)
    _, want, _ = t.step_update(case, case.step)
    total = math.sqrt(sum(float(np.sum(w * w)) for w in want))
    pairs = [
        (float(np.linalg.norm(g - w)), float(np.linalg.norm(w)))
        for g, w in zip(got, want, strict=True)
    ]
    return {
        "used": max(d / (rtol * own + floor * total) for d, own in pairs),
        "relative": max((d / own for d, own in pairs if own > 1e-5 * total), default=0.0),
        "noise": max((d / total for d, own in pairs if own <= 1e-5 * total), default=0.0),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--case", action="append", choices=CASES)
    args = parser.parse_args()
    print("| model | share of tolerance used (max over processes) | own-relative | noise |")
    print("|---|---|---|---|")
    for name in args.case or CASES:
        runs = []
        for _ in range(args.processes):
            code = (
                f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); "
                f"from benchmarks.lms_equivalence import measure; "
                f"print(json.dumps(measure({name!r})))"
            )
            done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
            if done.returncode:
                sys.exit(f"{name}: {done.stderr[-2000:]}")
            runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        used = [r["used"] for r in runs]
        print(
            f"| {name} | {max(used):.1%} ({', '.join(f'{u:.1%}' for u in used)}) "
            f"| {max(r['relative'] for r in runs):.2e} | {max(r['noise'] for r in runs):.2e} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
