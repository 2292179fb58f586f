"""Benchmark: what LMS costs in throughput on the emulated device, and where that time goes.

Issue 11's goals, at the largest size that trains without LMS (device memory = the plain step's
measured allocator peak): LMS auto-tuned (needed or not) >= 0.9 x the plain step's images/sec,
everything swapped (TFLMSv2's 1/1/0, which runs in TensorFlow's own order) >= 0.6 x. Also
measured: everything swapped in the enforced order (`ordering=1`), and the enforced order alone
(no swaps), which is what auto-tuning adds when a few swaps suffice.

Each fresh process times every variant in interleaved rounds (plain, auto, ..., plain, auto, ...)
so the machine's load drifts over all of them alike, after the LMS variants' closed loops hold
their plans (the plain step runs last in the warm-up: `warm_up`), for device memory from the plain
step's peak measured in a fresh process before; the ratio per process is median(plain) /
median(variant); the table shows the median over `--runs` processes and their range. With
`--profile`, one more process per case prints the step's time per op type (TensorFlow's profiler):
PyFunc (the host store's hand-offs), DeepCopy (swap-in copies into the allocator) and the kernels.

    python benchmarks/lms_throughput.py [--case NAME ...] [--runs 3] [--rounds 5] [--profile]
    python benchmarks/lms_throughput.py --fractions 0.6 0.4 [--case NAME ...]
        [--links 2GB/s 8GB/s 32GB/s] [--orderings 0 1]

With `--fractions` the variants are LMS auto-tuned (the default options) for device memory of
each fraction of the plain step's measured peak (issue 43: LMS on / off >= 0.85 at 0.6x and
>= 0.7 at 0.4x on every model that has a plan). With `--links` also on those emulated links,
each with its step / bound: the bound is the larger of the plain step and each direction's
transfers on the link (bytes / bandwidth + 10 us a transfer; issue 43's goal: <= 1.2). A variant
whose closed loop keeps no plan (NothingFitsError) is shown as refused, with why, beside the others.
"""

import argparse
import collections
import glob
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from lms_emulated import CASES, build_case, measure, run_json_child  # noqa: E402

LINK_LATENCY = "10us"  # per transfer on the emulated links of --links
WARMUP_LIMIT = 8  # steps at most a variant runs before timing, for the closed loop to hold
DEFAULT_CASES = ["googlenet", "resnet50", "deeplabv3plus", "unet3d", "mobilenetv2", "transformer"]
EVERYTHING = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}
VARIANTS = {  # name -> LMS keyword arguments (device_memory added: the plain peak)
    "auto": {"safety_ratio": 0.8},  # the default; the others plan to the device memory itself
    "ordered, no swaps": {
        "swapout_threshold": 10**9,
        "swapin_ahead": 1,
        "swapin_groupby": 0,
        "ordering": 1,
    },
    "everything swapped": EVERYTHING,
    "everything swapped, ordered": {**EVERYTHING, "ordering": 1},
}


def fraction_variants(fractions, links=(), orderings=()) -> dict:
    """Auto-tuned LMS with its default options at each fraction of the plain peak, without a
    link and on each emulated link of `links` (bandwidths, 10 us a transfer); with `orderings`,
    also auto-tuned in each of those orders only (0: TensorFlow's, 1: the enforced one)."""
    variants = {}
    for f in fractions:
        variants[f"auto {f}x"] = {"fraction": f}
        for ordering in orderings:
            variants[f"auto {f}x ordering={ordering}"] = {"fraction": f, "ordering": ordering}
        for link in links:
            variants[f"auto {f}x {link}"] = {"fraction": f, "link": link}
    return variants


def link_of(options: dict):
    """The variant's emulated link (an `lms.Link`), or None."""
    import lms

    if "link" not in options:
        return None
    return lms.Link.of({"bandwidth": options["link"], "latency": LINK_LATENCY})


def peak_child(case: str) -> dict:
    """The plain step's measured peak, in a process of its own (see `warm_up`)."""
    import keras

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    return {"case": case, "peak": measure(step, images, labels, 2)[0]}


def _variants(case: str, variants: dict, plain_peak: int | None = None):
    """The plain step and each variant wrapped by LMS for device memory from `plain_peak` (the
    plain step's measured peak in another fresh process; measured here when None), each
    prepared."""
    import keras

    import lms

    keras.utils.set_random_seed(0)
    step, images, labels = build_case(*CASES[case])
    if plain_peak is None:
        plain_peak = measure(step, images, labels, 2)[0]
    functions, planners = {}, {}
    for name, options in variants.items():
        if "fraction" in options:
            memory = int(plain_peak * options["fraction"])
            ordering = {"ordering": options["ordering"]} if "ordering" in options else {}
            planners[name] = lms.LMS(device_memory=memory, link=link_of(options), **ordering)
        else:
            planners[name] = lms.LMS(device_memory=plain_peak, **{"safety_ratio": 1.0, **options})
        functions[name] = planners[name].wrap(step)
        functions[name].prepare(images, labels)
    return {"plain": step, **functions}, planners, images, labels


def warm_up(functions: dict, planners: dict, images, labels) -> dict:
    """Run each function until its closed loop holds a plan (its corrections re-plan and
    rewrite the step: a cost of the first steps, not of the plan timed), the LMS variants
    first and the plain step last; drop the variants the closed loop refused (returned: name ->
    why, a result, not a crash).

    Plain last: what the plain step's function keeps allocated between calls (4-10 MiB of
    GoogLeNet 224² b4's ~200 MiB here) sat in the LMS variants' measured peaks, which no LMS
    user's process has, and the closed loop swapped more to make room for it (GoogLeNet at 0.6x:
    measured 112-119 MiB against 105 simulated with the plain step run first, 106 without)."""
    import lms

    refused = {}
    for name, function in sorted(functions.items(), key=lambda item: item[0] == "plain"):
        try:
            float(function(images, labels))
            float(function(images, labels))
            for _ in range(WARMUP_LIMIT):
                if not getattr(function, "calibrating", False):
                    break
                float(function(images, labels))
        except lms.NothingFitsError as error:
            refused[name] = str(error).split(" (")[0]
            del functions[name], planners[name]
            continue
        if hasattr(function, "reset_traffic"):
            function.reset_traffic()
    return refused


def timing_child(
    case: str, rounds: int, steps: int, variants: dict = VARIANTS, plain_peak: int | None = None
) -> dict:
    functions, planners, images, labels = _variants(case, variants, plain_peak)
    refused = warm_up(functions, planners, images, labels)
    seconds = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            started = time.perf_counter()
            for _ in range(steps):
                float(function(images, labels))
            seconds[name].append((time.perf_counter() - started) / steps)
    plain = statistics.median(seconds["plain"])
    bound = {}  # on a link: step / max(plain step, each direction's transfers on the link)
    for name in planners:  # the variants that kept a plan
        link, traffic = link_of(variants[name]), functions[name].traffic()
        if link is None or traffic is None:
            continue
        out = traffic.out_bytes_per_step / (link.out_bandwidth or link.bandwidth)
        back = traffic.in_bytes_per_step / link.bandwidth
        out += link.latency * traffic.swap_outs_per_step
        back += link.latency * traffic.swap_ins_per_step
        bound[name] = statistics.median(seconds[name]) / max(plain, out, back)
    return {
        "case": case,
        "batch": CASES[case][3],
        "seconds": seconds,
        "ratio": {name: plain / statistics.median(s) for name, s in seconds.items()},
        "swaps": {name: p.report.swapped_tensors for name, p in planners.items()},
        "swapped_mib": {name: p.report.swapped_bytes / 2**20 for name, p in planners.items()},
        "ordering": {name: p.report.parameters["ordering"] for name, p in planners.items()},
        "plans": {name: functions[name].plans for name in planners},
        "bound": bound,
        "refused": refused,
    }


def profile_child(case: str, steps: int) -> dict:
    """Milliseconds per step by op type, per variant (the profiler's host-CPU plane)."""
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    functions, _, images, labels = _variants(case, VARIANTS)
    result = {}
    for name, function in functions.items():
        for _ in range(2):
            float(function(images, labels))
        with tempfile.TemporaryDirectory() as logdir:
            tf.profiler.experimental.start(logdir)
            for _ in range(steps):
                float(function(images, labels))
            tf.profiler.experimental.stop()
            path = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[-1]
            space = xplane_pb2.XSpace()
            space.ParseFromString(Path(path).read_bytes())
        plane = next(p for p in space.planes if p.name == "/host:CPU")
        per_type = collections.Counter()
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):  # the executor's threads: op kernels
                continue
            for event in line.events:
                label = plane.event_metadata[event.metadata_id].name
                if ":" in label and not label.startswith("Process"):  # kernels: "name:type"
                    per_type[label.split(":")[-1]] += event.duration_ps / 1e9 / steps
        result[name] = dict(per_type.most_common(8))
    return {"case": case, "profile": result}


def _run_child(flag: str, case: str, args, plain_peak: int | None = None) -> dict | None:
    arguments = [flag, case, "--rounds", str(args.rounds), "--steps", str(args.steps)]
    if plain_peak is not None:
        arguments += ["--plain-peak", str(plain_peak)]
    if args.fractions:
        arguments += ["--fractions", *(str(f) for f in args.fractions)]
    if args.links:
        arguments += ["--links", *args.links]
    if args.orderings:
        arguments += ["--orderings", *(str(o) for o in args.orderings)]
    return run_json_child(__file__, arguments, f"{case}: {flag}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    parser.add_argument("--runs", type=int, default=3, help="fresh processes per case")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per process")
    parser.add_argument("--steps", type=int, default=3, help="steps per variant and round")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--fractions", nargs="*", type=float, help="auto-tuned at these x plain")
    parser.add_argument(
        "--links", nargs="*", default=[], help="with --fractions: also on these emulated links"
    )
    parser.add_argument(
        "--orderings",
        nargs="*",
        type=int,
        default=[],
        help="with --fractions: also in these orders",
    )
    parser.add_argument("--timing-child", help=argparse.SUPPRESS)
    parser.add_argument("--peak-child", help=argparse.SUPPRESS)
    parser.add_argument("--plain-peak", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = (
        fraction_variants(args.fractions, args.links, args.orderings)
        if args.fractions
        else VARIANTS
    )
    if args.timing_child:
        result = timing_child(args.timing_child, args.rounds, args.steps, variants, args.plain_peak)
        print(json.dumps(result))
        return
    if args.peak_child:
        print(json.dumps(peak_child(args.peak_child)))
        return
    if args.profile_child:
        print(json.dumps(profile_child(args.profile_child, args.steps)))
        return
    from tabulate import tabulate

    cases = args.case or DEFAULT_CASES
    rows, started = [], time.perf_counter()
    for number, case in enumerate(cases, 1):
        runs = []
        for run in range(args.runs):
            # the plain peak in a fresh process of its own: see `warm_up`
            peak = _run_child("--peak-child", case, args)
            result = peak and _run_child("--timing-child", case, args, peak["peak"])
            if result:
                runs.append(result)
            done = (number - 1) * args.runs + run + 1
            eta = (time.perf_counter() - started) / done * (len(cases) * args.runs - done)
            print(f"{case}: process {run + 1} of {args.runs} (ETA {eta / 60:.0f} min)", flush=True)
        if not runs:
            continue
        first = runs[0]
        plain_rate = statistics.median(
            first["batch"] / statistics.median(r["seconds"]["plain"]) for r in runs
        )
        row = [case, f"{plain_rate:.1f}"]
        for name in variants:
            ratios = sorted(r["ratio"][name] for r in runs if name in r["ratio"])
            refusals = [r["refused"][name] for r in runs if name in r.get("refused", {})]
            if not ratios:
                row.append(f"refused in {len(refusals)} of {len(runs)}: {refusals[0]}")
                continue
            # the plan of the first process that kept one
            shown = next(r for r in runs if name in r["ratio"])
            cell = (
                f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f}); "
                f"{shown['swaps'][name]} swaps, {shown['swapped_mib'][name]:.0f} MiB, "
                f"ordering {shown['ordering'][name]}, plans {shown['plans'][name]}"
            )
            bounds = sorted(r["bound"][name] for r in runs if name in r.get("bound", {}))
            if bounds:
                cell += f"; step / bound {statistics.median(bounds):.2f} ({bounds[-1]:.2f} max)"
            if refusals:
                cell += f"; refused in {len(refusals)} of {len(runs)}"
            row.append(cell)
        rows.append(row)
        if args.profile:
            profiled = _run_child("--profile-child", case, args)
            for name, per_type in (profiled or {}).get("profile", {}).items():
                top = ", ".join(f"{op} {ms:.0f}" for op, ms in per_type.items())
                print(f"  {case} / {name}: ms per step in {top}", flush=True)
    headers = ["case", "plain images/s"] + [f"{name} / plain" for name in variants]
    print(tabulate(rows, headers, tablefmt="github"))
    print(
        "ratio: median over processes of median(plain) / median(variant) over interleaved "
        "rounds; (min-max over processes)"
    )


if __name__ == "__main__":
    main()
