"""Benchmark: the suite's trial throughput / a plain tf.function training loop (goal >= 0.98).

Both sides train the same workload, batch, precision and synthetic data, each in a fresh process,
alternating for several rounds. Each round's two runs sit next to each other in time, so the
figure is the median of the per-round ratios (this 2-core VM's speed drifts by +-10 % between
minutes, which a ratio of two global medians would mix in). The plain loop is what a user would
write: one tf.function step, N calls, one synchronisation at the end, total time. The suite's
trial times every step separately (that is what per-step statistics cost). Prints the ratio last.

    python benchmarks/trial_overhead.py [--workload googlenet --resolution 128 --batch 4 ...]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def plain_loop(params: dict) -> float:
    """images/sec of an untimed-per-step loop; runs inside a child process."""
    import keras
    import tensorflow as tf

    from suite.workloads import build_workload, get_workload
    from suite.workloads.data import synthetic_batch

    keras.utils.set_random_seed(params["seed"])
    model, loss_fn = build_workload(
        params["workload"],
        params["resolution"],
        params["batch"],
        params["precision"],
        params["classes"],
    )
    optimizer = keras.optimizers.SGD(learning_rate=0.005, momentum=0.9)
    optimizer.build(model.trainable_variables)
    info = get_workload(params["workload"])
    images, labels = synthetic_batch(
        info, params["resolution"], params["batch"], params["classes"], params["seed"]
    )

    @tf.function
    def step(x, y):
        with tf.GradientTape() as tape:
            loss = loss_fn(y, model(x, training=True))
        gradients = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(gradients, model.trainable_variables, strict=True))
        return loss

    for _ in range(params["warmup_steps"]):
        float(step(images, labels))
    start = time.perf_counter()
    for _ in range(params["steps"]):
        loss = step(images, labels)
    float(loss)
    return params["batch"] * params["steps"] / (time.perf_counter() - start)


def run_plain(params: dict) -> float:
    import os

    from suite.environment import TRIAL_ENVIRONMENT

    env = {**os.environ, **TRIAL_ENVIRONMENT, "PYTHONPATH": str(ROOT)}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as handle:
        json.dump(params, handle)
        handle.flush()
        out = subprocess.run(
            [sys.executable, __file__, "--child", handle.name],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    return float(out.strip().splitlines()[-1])


def run_suite(params: dict, log: Path) -> float:
    from suite.running.trial import run_trial
    from suite.specs import TrialParams

    result = run_trial(TrialParams.from_dict(params), 3600, log)
    if result.outcome != "ok":
        raise SystemExit(f"suite trial failed: {result.outcome}: {result.error}")
    return result.metrics.images_per_sec.total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="googlenet")
    parser.add_argument("--resolution", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--warmup-steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(plain_loop(json.loads(Path(args.child).read_text())))
        return
    from suite.workloads import get_workload

    params = {
        "workload": args.workload,
        "resolution": args.resolution,
        "batch": args.batch,
        "precision": args.precision,
        "classes": get_workload(args.workload).default_classes,
        "steps": args.steps,
        "warmup_steps": args.warmup_steps,
        "data": {"kind": "synthetic"},
        "memory_budget_bytes": None,
        "seed": 0,
    }
    suite_rates, plain_rates = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for round_index in range(args.rounds):
            # alternate the order so drift in machine speed hits both sides alike
            order = ("suite", "plain") if round_index % 2 == 0 else ("plain", "suite")
            for side in order:
                if side == "suite":
                    suite_rates.append(run_suite(params, Path(scratch, f"{round_index}.log")))
                else:
                    plain_rates.append(run_plain(params))
            print(
                f"round {round_index + 1}/{args.rounds}: suite {suite_rates[-1]:.3f} "
                f"images/sec, plain loop {plain_rates[-1]:.3f} images/sec",
                flush=True,
            )
    ratios = [s / p for s, p in zip(suite_rates, plain_rates, strict=True)]
    print(
        f"{args.workload} {args.resolution}px batch {args.batch} {args.precision}, "
        f"{args.steps} steps, {args.rounds} rounds"
    )
    print(
        f"medians: suite trial {statistics.median(suite_rates):.3f} images/sec, plain "
        f"tf.function loop {statistics.median(plain_rates):.3f}; per-round ratios "
        f"{min(ratios):.3f}..{max(ratios):.3f}"
    )
    print(
        f"ratio suite/plain (median of per-round ratios): {statistics.median(ratios):.3f} "
        "(goal >= 0.98)"
    )


if __name__ == "__main__":
    main()
