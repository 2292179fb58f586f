"""Where a fixed LMS plan's measured peak goes beyond its simulation, in fresh processes.

For one workload, size and plan (default: everything swapped in the enforced order), each child
process builds the step, runs it `--steps` times under the profiler and prints, per step, the
measured peak and what the allocator held before and after it; then the bytes the step asked for
at its own peak, the chunks BFC gave them, and the same request sequence replayed through
`lms/memory/allocator.py` (from the process's start, and per step from a fresh heap) beside the
simulator's padded and unpadded peaks. Two variants run interleaved:

- `split`: the rewrite as shipped (sums of 3+ inputs as chains of two-input adds);
- `addn`: those sums left as AddN, which Grappler's memory optimizer may rewrite into a
  temporary variable and a zeros constant when RAM is short (whether it does depends on the RAM
  available when the step compiles: compare the two on the same machine, in the same minute).

The last step's real requests are also replayed through the allocator model as a GPU of
`--device-memory` would place them (one region), and there with BFC's split rule scaled to the
device as on a 16 GiB GPU (128 MiB per 16 GiB): what the absolute 128 MiB costs at this scale.

    python benchmarks/plan_peak_anatomy.py [--workload resnet50] [--resolution 1408]
        [--batch 1] [--plan 1,1,0,1] [--steps 3] [--runs 2] [--variants split,addn]
        [--device-memory 1GiB]

Seen here (AMD EPYC, oneDNN, TF 2.21; two processes each, the same numbers in both): ResNet50
1408² b1 everything swapped, `split` 750 / 720 / 749 MiB per step, 619 MiB asked at the peak in
749 MiB of chunks, allocator held 236 MiB between steps, simulated 739 (619 asked + 120
padding); `addn` 1020 / 1111 / 1019 MiB, 861 MiB asked, 470 MiB held between steps. GoogLeNet
1280² b2: 591 MiB asked at the floor, 692-724 MiB measured, the allocator model on the real
requests 698-724 (its chunks, not the plan, are the gap to the floor). ResNet50 1776² b1, two
processes: 1005 / 1036 MiB, 870 asked at the peak (one 192.5 MiB request in a 319.5 MiB chunk);
replayed on a 1 GiB GPU 1026, with a 16 GiB GPU's split rule 892. GoogLeNet 1248² b2 (640 MiB):
693 / 619 and 641 / 635, 514-571 asked; on a 640 MiB GPU 664, with the scaled rule 587.
"""

import argparse
import glob
import json
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

MiB = 2**20


def _events(logdir: str):
    """Allocator events (time, allocation?, stats) and the step calls' (start, end), in order."""
    from lms import _tf_private

    path = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[-1]
    space = _tf_private.xplane_pb2().XSpace()
    space.ParseFromString(Path(path).read_bytes())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    names, stats = plane.event_metadata, plane.stat_metadata
    events, calls = [], []
    for line in plane.lines:
        for event in line.events:
            name = names[event.metadata_id].name
            start = line.timestamp_ns * 1000 + event.offset_ps
            if name in ("MemoryAllocation", "MemoryDeallocation"):
                values = {
                    stats[s.metadata_id].name: s.int64_value or s.uint64_value
                    for s in event.stats
                    if stats[s.metadata_id].name
                    in ("addr", "requested_bytes", "allocation_bytes", "peak_bytes_in_use")
                }
                events.append((start, name == "MemoryAllocation", values))
            elif name.startswith("EagerLocalExecute: __inference_"):
                calls.append((start, start + event.duration_ps))
    events.sort(key=lambda e: e[0])
    return events, sorted(calls)


def _replay(events, window=None) -> float:
    """The allocator model's peak over `events`, in MiB: from the process's start, or within
    `window` from a fresh heap that first holds what was alive when the window opened."""
    from lms.memory.allocator import BestFitAllocator

    model, handles = BestFitAllocator(), {}
    if window is not None:
        alive = {}
        for time, allocation, values in events:
            if time >= window[0]:
                break
            if allocation:
                alive[values["addr"]] = values["requested_bytes"]
            else:
                alive.pop(values["addr"], None)
        for address, size in alive.items():
            handles[address] = model.allocate(size)[0]
        model.peak = model.in_use
        events = [e for e in events if window[0] <= e[0] <= window[1]]
    for _, allocation, values in events:
        if allocation:
            handles[values["addr"]] = model.allocate(values["requested_bytes"])[0]
        elif values.get("addr") in handles:
            model.free(handles.pop(values["addr"]))
    return model.peak / MiB


def _replay_as(events, window, allocator) -> float:
    """The peak within `window` (MiB) of the process's requests replayed from its start through
    `allocator` (a fresh `lms.memory.allocator.BestFitAllocator`)."""
    handles, peak = {}, 0
    for time, allocation, values in events:
        if allocation:
            handles[values["addr"]] = allocator.allocate(values["requested_bytes"])[0]
        elif values.get("addr") in handles:
            allocator.free(handles.pop(values["addr"]))
        if window[0] <= time <= window[1]:
            peak = max(peak, allocator.in_use)
    return peak / MiB


def _allocators(device_bytes: int) -> dict:
    """The allocators the real requests are replayed through: the emulated device's (the CPU's
    BFC: regions doubling from 2 MiB), a GPU of `device_bytes` (one region, TensorFlow's default),
    and that GPU with BFC's split rule scaled to its size as on a 16 GiB GPU (a chunk is split
    when 128 MiB per 16 GiB of device memory would be left over): what the emulated device's
    absolute 128 MiB costs at this scale."""
    from lms.memory.allocator import (
        MAX_INTERNAL_FRAGMENTATION,
        BestFitAllocator,
        cpu_allocator_limit,
    )

    scaled = MAX_INTERNAL_FRAGMENTATION * device_bytes // (16 << 30)
    return {
        "cpu": lambda: BestFitAllocator(cpu_allocator_limit(), True),
        "gpu": lambda: BestFitAllocator(device_bytes, False),
        "gpu_scaled_rule": lambda: BestFitAllocator(device_bytes, False, scaled),
    }


def _asked_at_peak(events, window) -> tuple[float, float]:
    """Bytes asked and chunk bytes of the buffers alive at the window's chunk peak, in MiB."""
    live, in_use, best, at_best = {}, 0, -1, {}
    for time, allocation, values in events:
        if allocation:
            live[values["addr"]] = values
            in_use += values["allocation_bytes"]
        elif values.get("addr") in live:
            in_use -= live.pop(values["addr"])["allocation_bytes"]
        if window[0] <= time <= window[1] and in_use > best:
            best, at_best = in_use, dict(live)
    asked = sum(v["requested_bytes"] for v in at_best.values())
    return asked / MiB, best / MiB


def child(workload, resolution, batch, plan, steps, variant, device_memory) -> dict:
    import tensorflow as tf

    import lms
    from lms.device import rewriter
    from lms.values.budget import parse_size
    from suite.workloads import WORKLOADS, build_workload, data, training

    if variant == "addn":
        rewriter._split_sums = lambda *args: None
    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    info = WORKLOADS[workload]
    model, loss_fn = build_workload(workload, resolution, batch, "fp32", info.default_classes)
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), "fp32")
    images, labels = data.synthetic_batch(info, resolution, batch, info.default_classes)
    names = ("swapout_threshold", "swapin_ahead", "swapin_groupby", "ordering")
    fixed = dict(zip(names, plan, strict=True))
    # no closed loop: the plan as given, measured
    planner = lms.LMS(device_memory="64GiB", batch_size=batch, calibration_steps=0, **fixed)
    wrapped = planner.wrap(step)
    peaks, held = [], []
    for _ in range(steps):
        tf.config.experimental.reset_memory_stats("CPU:0")
        float(wrapped(images, labels))
        info_ = tf.config.experimental.get_memory_info("CPU:0")
        peaks.append(info_["peak"] / MiB)
        held.append(info_["current"] / MiB)
    tf.profiler.experimental.stop()
    events, calls = _events(logdir)
    last = calls[-1]
    asked, chunks = _asked_at_peak(events, last)
    report = planner.report
    analysis = report.analysis
    simulated = report.peak_bytes_with_lms / MiB
    unpadded = simulated - report.peak["allocator_padding_bytes"] / MiB
    resident = analysis.variable_bytes + analysis.input_bytes
    return {
        "peaks": peaks,
        "held_after": held,
        "asked_at_last_peak": asked,
        "chunks_at_last_peak": chunks,
        "replayed_from_start": _replay(events),
        "replayed_last_step_fresh": _replay(events, last),
        "replayed_last_step_as": {
            name: _replay_as(events, last, make())
            for name, make in _allocators(parse_size(device_memory)).items()
        },
        "simulated_padded": simulated,
        "simulated_asked": unpadded,
        "floor": (analysis.floor_op.bytes + resident) / MiB,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="resnet50")
    parser.add_argument("--resolution", type=int, default=1408)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--plan", default="1,1,0,1", help="threshold,ahead,groupby,ordering")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument(
        "--device-memory", default="1GiB", help="the GPU the requests are also replayed on"
    )
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--variants", default="split,addn", help="split, addn or both")
    parser.add_argument("--child", choices=("split", "addn"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    plan = [int(v) for v in args.plan.split(",")]
    if args.child:
        result = child(
            args.workload,
            args.resolution,
            args.batch,
            plan,
            args.steps,
            args.child,
            args.device_memory,
        )
        print(json.dumps(result))
        return
    from lms_emulated import run_json_child

    results = {variant: [] for variant in args.variants.split(",")}
    for run in range(args.runs):
        for variant in results:
            print(f"run {run + 1}/{args.runs}: {variant}", file=sys.stderr, flush=True)
            arguments = [
                f"--{k.replace('_', '-')}={v}" for k, v in vars(args).items() if k != "child"
            ]
            found = run_json_child(__file__, [*arguments, f"--child={variant}"], variant)
            if found:
                results[variant].append(found)
    label = f"{args.workload} {args.resolution}px b{args.batch}, plan {args.plan}"
    print(f"{label} (MiB; per process):")
    for variant, runs in results.items():
        for found in runs:
            print(
                f"  {variant}: measured {' / '.join(f'{p:.0f}' for p in found['peaks'])}, "
                f"held after each step {' / '.join(f'{h:.0f}' for h in found['held_after'])}; "
                f"at the last peak asked {found['asked_at_last_peak']:.0f} in chunks "
                f"{found['chunks_at_last_peak']:.0f}; allocator model on the real requests "
                f"{found['replayed_from_start']:.0f} (last step from a fresh heap "
                f"{found['replayed_last_step_fresh']:.0f}); simulated "
                f"{found['simulated_padded']:.0f} ({found['simulated_asked']:.0f} asked); "
                f"floor {found['floor']:.0f}"
            )
            replays = found["replayed_last_step_as"]
            print(
                f"  {variant}: the last step's requests replayed (peak): on the CPU's allocator "
                f"{replays['cpu']:.0f}, on a {args.device_memory} GPU (one region) "
                f"{replays['gpu']:.0f}, there with the split rule of a 16 GiB GPU "
                f"{replays['gpu_scaled_rule']:.0f}"
            )
        if runs:
            medians = statistics.median(max(f["peaks"]) for f in runs)
            print(f"  {variant}: median over processes of the worst step {medians:.0f}")


if __name__ == "__main__":
    main()
