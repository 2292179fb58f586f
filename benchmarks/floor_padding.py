"""Benchmark: what TensorFlow's allocator adds to the plan that swaps the most, at the emulated
device's sizes and at a GPU's (simulation only: planning, no step runs; seconds per case).

A limit search's reach is bounded by the swap-only floor (the largest op's footprint + the
resident bytes, in bytes asked). What the allocator gives those requests is BFC's chunks: a
request takes a whole free chunk that is less than twice its size unless 128 MiB or more would
be left over. At the emulated device's budgets (0.6-1.5 GiB) the floor's tensors are 150-250 MiB,
so a request can hold up to 127 MiB more than it asked; on a 16-32 GiB GPU the same rule wastes
at most 128 MiB of tensors of gigabytes. This prints, per workload, the plan that swaps the most
(`lms.tuning.tuner.floor_parameters`) with the allocator model (`lms/memory/allocator.py`, which
reproduces the measured peak from the real request sequence: benchmarks/plan_peak_anatomy.py) at the
reach search's limit size and budget, and at the size whose floor is 0.9 x a 16 GiB GPU: bytes
asked, the chunks of the emulated device's allocator (the CPU's BFC, regions doubling), and the
chunks of a GPU's (one region of the device memory, TensorFlow's default).

    python benchmarks/floor_padding.py [--workload NAME ...] [--gpu-memory 16GiB]
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MiB = 2**20

# workload -> (batch, the reach search's LMS limit, its budget): benchmarks/limits.py --reach
# --budget as measured (CHANGELOG, issue 26, session 3), resolutions in pixels (voxels for 3D).
CASES = {
    "googlenet": (2, 1232, "640MiB"),
    "resnet50": (1, 1760, "1GiB"),
    "deeplabv3plus": (1, 1216, "1GiB"),
    "unet3d": (1, 88, "1536MiB"),
}


def floor_plan(workload: str, resolution: int, batch: int, device_memory: str, chunks: str):
    """The LMS report of the plan that swaps the most, planned (not run) for `device_memory` on
    the emulated device (its kernels' temporaries), its peak in the chunks of the emulated
    device's allocator (`chunks` "cpu"), of a GPU's ("gpu": one region of the device memory), or
    in bytes asked ("asked")."""
    import functools

    import tensorflow as tf

    import lms
    from lms.memory.allocator import BestFitAllocator
    from lms.tuning.tuner import floor_parameters
    from suite.workloads import WORKLOADS, build_workload, data, training

    info = WORKLOADS[workload]
    model, loss_fn = build_workload(workload, resolution, batch, "fp32", info.default_classes)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    images, labels = data.synthetic_batch(info, resolution, batch, info.default_classes)
    specs = [tf.TensorSpec(t.shape, t.dtype) for t in (images, labels)]
    allocator = None if chunks == "asked" else "bfc"
    floor = floor_parameters(lms.Options(device_memory).parameters).as_dict()
    planner = lms.LMS(device_memory, batch_size=batch, allocator=allocator, **floor)
    if chunks == "gpu":  # the same analysis and plan; only the allocator model differs
        one_region = functools.partial(BestFitAllocator, planner.device_bytes, False)
        planner.pipeline.allocator_model = lambda: one_region
    report = planner.plan_only(step, *specs)
    tf.keras.backend.clear_session()
    return report


def gpu_size(report, resolution: int, dims: int, gpu_bytes: int, grid: int) -> int:
    """The resolution (a multiple of `grid`) whose floor is about 0.9 x `gpu_bytes`, scaled from
    one report's floor (an lms.PlanReport: the footprint and inputs grow with the elements,
    variables do not)."""
    analysis = report.analysis
    growing = analysis.floor_op.bytes + analysis.input_bytes
    room = 0.9 * gpu_bytes - analysis.variable_bytes
    elements = resolution**dims * room / growing
    return max(grid, int(elements ** (1 / dims)) // grid * grid)


def row(workload: str, resolution: int, batch: int, device_memory: str) -> tuple[list, dict]:
    """One table row (peaks in MiB, chunks beside the bytes asked), and the emulated device's
    report."""
    reports = {
        chunks: floor_plan(workload, resolution, batch, device_memory, chunks)
        for chunks in ("asked", "cpu", "gpu")
    }
    asked = reports["asked"].peak_bytes_with_lms / MiB

    def chunks(name):
        padded = reports[name].peak_bytes_with_lms / MiB
        return f"{padded:.0f} (+{100 * (padded / asked - 1):.1f} %)"

    line = [workload, f"{resolution} b{batch}", device_memory, f"{asked:.0f}"]
    return line + [chunks("cpu"), chunks("gpu")], reports["cpu"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", choices=sorted(CASES))
    parser.add_argument("--gpu-memory", default="16GiB")
    args = parser.parse_args()
    from tabulate import tabulate

    from lms.values.budget import parse_size
    from suite.workloads import WORKLOADS

    rows = []
    for workload in args.workload or CASES:
        batch, resolution, budget = CASES[workload]
        grid = 8 if workload == "unet3d" else 16
        print(f"{workload}: planning at {resolution} for {budget}", file=sys.stderr, flush=True)
        line, report = row(workload, resolution, batch, budget)
        rows.append(line)
        dims = WORKLOADS[workload].spatial_dims
        large = gpu_size(report, resolution, dims, parse_size(args.gpu_memory), grid)
        print(f"{workload}: planning at {large} for {args.gpu_memory}", file=sys.stderr, flush=True)
        rows.append(row(workload, large, batch, args.gpu_memory)[0])
    headers = [
        "workload",
        "size",
        "device",
        "asked (MiB)",
        "emulated device's chunks",
        "a GPU's chunks (one region)",
    ]
    print("The plan that swaps the most, simulated peak with the allocator's chunks:")
    print(tabulate(rows, headers=headers, tablefmt="github"))


if __name__ == "__main__":
    main()
