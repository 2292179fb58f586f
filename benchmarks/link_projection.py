"""Benchmark: the step-time model (lms/timing/steptime.py) against measured steps on emulated links.

Issue 14's goal: the projection is within 10 % of the measured step time on the emulated device
at three emulated link speeds, for GoogLeNet and DeepLabV3+ with LMS (everything swapped, the
seeds' 1/1/0/0). Each case runs in a fresh process: one LMS step per link (no link: host-memory
copies; then each emulated speed) timed in interleaved rounds, so the machine's load drifts over
all of them alike; one profiled step of the no-link step, replayed by `lms.project` on each
link with the no-link median step time, gives the projections. The error is projected /
measured - 1 on the medians; its range is over the rounds (each round's median against the
projection).

    python benchmarks/link_projection.py [--case NAME ...] [--speeds 0.5GB/s,2GB/s,8GB/s]
        [--rounds 5] [--steps 3] [--latency 10us]
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

DEFAULT_CASES = ["googlenet", "deeplabv3plus", "mobilenetv2", "transformer"]
EVERYTHING = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}


def child(case: str, speeds: list[str], latency: str, rounds: int, steps: int, inter_op: int):
    import keras
    import tensorflow as tf

    import lms

    if inter_op:
        tf.config.threading.set_inter_op_parallelism_threads(inter_op)

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    peak = measure(step, images, labels, 2)[0]
    links = {"none": None} | {s: lms.Link.of({"bandwidth": s, "latency": latency}) for s in speeds}
    functions = {}
    for name, link in links.items():
        functions[name] = lms.LMS(device_memory=peak, link=link, **EVERYTHING).wrap(step)
        for _ in range(2):  # trace, plan, rewrite; then one step to warm up
            functions[name](images, labels)
    times = {name: [] for name in links}
    for _ in range(rounds):
        for name, function in functions.items():
            run = []
            for _ in range(steps):
                started = time.perf_counter()
                function(images, labels)
                run.append(time.perf_counter() - started)
            times[name].append(statistics.median(run))
    profile, swaps = functions["none"].profile(images, labels)
    base = statistics.median(times["none"])
    traffic = functions["none"].traffic()
    rows = []
    for name, link in links.items():
        projected = lms.project(profile, swaps, link, base)
        measured = statistics.median(times[name])
        errors = [projected.step_seconds / t - 1 for t in times[name]]
        rows.append(
            {
                "link": name,
                "measured_s": measured,
                "projected_s": projected.step_seconds,
                "error": projected.step_seconds / measured - 1,
                "error_range": [min(errors), max(errors)],
                "busy_out_s": projected.busy_out,
                "busy_in_s": projected.busy_in,
                "waits": projected.waits,
            }
        )
    return {
        "case": case,
        "swapped_bytes": swaps.bytes_per_direction,
        "swap_ops": len(swaps.transfers),
        "profiled_ops": len(profile.ops),
        "traffic": traffic and traffic.to_dict(),
        "rows": rows,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--speeds", default="0.5GB/s,2GB/s,8GB/s")
    parser.add_argument("--latency", default="10us")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--inter-op",
        type=int,
        default=0,
        help="TensorFlow's inter-op threads (0: its default, one per core); a swap op waiting "
        "for the emulated link holds one",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    speeds = args.speeds.split(",")
    if args.child:
        result = child(args.child, speeds, args.latency, args.rounds, args.steps, args.inter_op)
        print(json.dumps(result))
        return
    print(
        f"{'case':<15} {'link':<9} {'measured':>9} {'projected':>9} {'error':>7} "
        f"{'error range (rounds)':>21} {'busy out/in':>13} {'waits':>5}"
    )
    errors = []
    for case in args.case or DEFAULT_CASES:
        arguments = ["--child", case, "--speeds", args.speeds, "--latency", args.latency]
        arguments += ["--rounds", str(args.rounds), "--steps", str(args.steps)]
        arguments += ["--inter-op", str(args.inter_op)]
        result = run_json_child(__file__, arguments, case)
        if result is None:
            continue
        moved = result["swapped_bytes"]
        print(
            f"{case}: {result['swap_ops']} swap ops, {moved['out'] / 2**20:.0f} MiB out and "
            f"{moved['in'] / 2**20:.0f} MiB in per step"
        )
        for row in result["rows"]:
            low, high = row["error_range"]
            if row["link"] != "none":
                errors.append(abs(row["error"]))
            print(
                f"{case:<15} {row['link']:<9} {row['measured_s'] * 1e3:7.0f}ms "
                f"{row['projected_s'] * 1e3:7.0f}ms {row['error']:+7.1%} "
                f"{f'{low:+.1%} .. {high:+.1%}':>21} "
                f"{row['busy_out_s'] * 1e3:5.0f}/{row['busy_in_s'] * 1e3:.0f}ms {row['waits']:5d}"
            )
    if errors:
        print(
            f"emulated links: median |error| {statistics.median(errors):.1%}, "
            f"max {max(errors):.1%} (goal: within 10 %)"
        )


if __name__ == "__main__":
    main()
