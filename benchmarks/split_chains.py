"""Split chains (issue 44 item 2): what chaining consecutive split ops saves a split plan on a GPU,
projected. For each case the step is planned with a GPU's mechanism (TensorFlow's copies,
`mechanism="device-copy"`, nothing runs: calibration off), once with each split op alone
(`split_chains=False`) and once chained (the default); the rewritten step's compute is estimated
by the roofline of a V100 and replayed by the step-time model on PCIe 3.0, NVLink 2.0 and
NVLink-C2C with every transfer the plan makes: swaps and the pieces' host copies, which
`lms.swap_graph` counts with the bytes they move. Prints per case and mode the ops split and
chained, the host bytes per step each way, the planning time, and images/s per link.

    .venv/bin/python benchmarks/split_chains.py                      # the recorded cases
    .venv/bin/python benchmarks/split_chains.py googlenet 2048 1 400MiB
    .venv/bin/python benchmarks/split_chains.py MobileNetV2 1536 1 400MiB   # a Keras application

What chaining saves when the step runs on the emulated device (host bytes counted by the host
store, step time): benchmarks/lms_split_measured.py with `auto` and `auto alone`.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

import tensorflow as tf  # noqa: E402
from lms_cases import named_case  # noqa: E402

import lms  # noqa: E402

CASES = [
    ("googlenet", 2048, 1, "400MiB"),
    ("resnet50", 1024, 1, "400MiB"),
    ("unet3d", 96, 1, "400MiB"),
    ("MobileNetV2", 1536, 1, "400MiB"),
]
LINKS = ("pcie3", "nvlink2", "nvlink-c2c")
GB = 1e9


def project(name: str, resolution: int, batch: int, memory: str, chained: bool) -> str:
    case = named_case(name, resolution, batch)
    planner = lms.LMS(
        device_memory=memory,
        mechanism="device-copy",
        calibration_steps=0,
        host_memory=None,
        split_chains=chained,
    )
    function = planner.wrap(case.step)
    specs = [tf.TensorSpec.from_tensor(t) for t in (case.images, case.labels)]
    mode = "chained" if chained else "alone"
    started = time.perf_counter()
    try:
        callable_, _ = function.prepare(*specs)
    except lms.NothingFitsError as error:
        return f"{name} {resolution} b{batch} {memory} {mode}: refused ({error})"
    planning = time.perf_counter() - started
    report = planner.report
    splits = report.splits or ()
    graph = callable_.graph
    profile = lms.roofline_profile(graph, lms.ROOFLINE_GPUS["v100"], batch)
    swaps = lms.swap_graph(graph, batch)
    moved = swaps.bytes_per_direction
    rates = []
    for link_name, (_, link) in lms.named_links(LINKS).items():
        step = lms.project(profile, swaps, link).step_seconds
        rates.append(f"{link_name} {batch / step:.3f}")
    compute = lms.project(profile, swaps, None).compute_seconds
    return (
        f"{name} {resolution} b{batch} {memory} {mode}: "
        f"fits {report.fits}, simulated {report.peak_bytes_with_lms / 2**20:.1f} MiB, "
        f"{len(splits)} split, {sum(1 for s in splits if s.get('chained_after'))} chained; "
        f"host {moved['in'] / GB:.2f} GB in, {moved['out'] / GB:.2f} GB out per step; "
        f"planning {planning:.1f} s; V100 compute {batch / compute:.3f} img/s; "
        f"img/s {', '.join(rates)}"
    )


def main(argv: list[str]) -> None:
    cases = [(argv[0], int(argv[1]), int(argv[2]), argv[3])] if argv else CASES
    for case in cases:
        for chained in (False, True):
            print(project(*case, chained), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
