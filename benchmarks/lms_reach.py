"""How far LMS's plans reach at GPU sizes, simulated (no GPU needed): issue 11's reach table.

For each seed case, the training step is traced from TensorSpecs at full size (only weights are
allocated), then: the simulated peak without LMS, the best peak with everything swappable
swapped in TensorFlow's own order (ordering=0) and in the enforced order (ordering=1), each as a
multiple of the floor (largest op's inputs + outputs + resident variables and inputs), and what
auto-tuning plans for the device at safety ratio 0.8 (checked with the BFC allocator's padding,
one region of the device's memory as on a GPU without memory growth), with analysis + tuning
time against trace time.

    python benchmarks/lms_reach.py [--case NAME ...]
"""

import argparse
import functools
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GIB = 2**30
# name -> (workload, resolution, batch, precision, device GiB)
CASES = {
    "resnet50-8000-b1": ("resnet50", 8000, 1, "fp32", 32),
    "unet3d-176-b1": ("unet3d", 176, 1, "fp32", 16),
    "deeplabv3plus-1600-b1": ("deeplabv3plus", 1600, 1, "fp32", 16),
    "googlenet-2240-b15-fp16": ("googlenet", 2240, 15, "fp16", 16),
    "deeplabv3plus-500-b16": ("deeplabv3plus", 500, 16, "fp32", 32),
}


def reach(workload: str, resolution: int, batch: int, precision: str, device_gib: float) -> list:
    import lms
    from lms.memory.allocator import BestFitAllocator
    from suite.workloads import WORKLOADS, build_workload, data, training

    info = WORKLOADS[workload]
    model, loss_fn = build_workload(workload, resolution, batch, precision, info.default_classes)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), precision)
    specs = data.batch_specs(info, resolution, batch, info.default_classes)
    started = time.perf_counter()
    concrete = step.get_concrete_function(*specs)
    trace = time.perf_counter() - started
    started = time.perf_counter()
    analysis = lms.internal.analyze(concrete.graph, batch)
    floor = analysis.largest_op[1] + analysis.resident_bytes
    best = {}
    for ordering in (0, 1):
        everything = lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=ordering))
        best[ordering] = lms.internal.simulate(analysis, everything).peak_bytes
    planning = time.perf_counter() - started
    started = time.perf_counter()
    try:
        gpu = functools.partial(BestFitAllocator, int(device_gib * GIB), False)
        tuned = lms.internal.tune(analysis, int(device_gib * GIB * 0.8), lms.Parameters(), gpu)
        verdict = "fits"
    except lms.NothingFitsError as error:
        tuned, verdict = error.closest, "does not fit"
    tuning = time.perf_counter() - started
    p = tuned.parameters
    return [
        f"{workload} {precision} b{batch} {resolution}",
        f"{device_gib:g} GiB",
        f"{lms.internal.simulate(analysis).peak_bytes / GIB:.1f}",
        f"{best[0] / GIB:.1f} ({best[0] / floor:.2f}x)",
        f"{best[1] / GIB:.1f} ({best[1] / floor:.2f}x)",
        f"{floor / GIB:.1f}",
        f"{verdict}: {tuned.simulation.peak_bytes / GIB:.1f} GiB, ordering {p.ordering}, "
        f"t/a/g {p.swapout_threshold}/{p.swapin_ahead}/{p.swapin_groupby}",
        f"{trace:.1f} s",
        f"{(planning + tuning) / trace:.2f}x",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(CASES))
    args = parser.parse_args()
    from tabulate import tabulate

    rows = []
    for number, name in enumerate(args.case or list(CASES), 1):
        rows.append(reach(*CASES[name]))
        print(f"case {number} of {len(args.case or CASES)} ({name}) done", flush=True)
    headers = ["case", "device", "no LMS GiB", "best, TF order", "best, enforced order"]
    headers += ["floor GiB", "auto-tuned (safety 0.8)", "trace", "(analysis+tuning)/trace"]
    print(tabulate(rows, headers, tablefmt="github"))


if __name__ == "__main__":
    main()
