"""Splitting's effect on the simulated plan (issue 31): for each case, the best simulated peak
swapping alone (`split="off"`) and with `split="auto"` (lms's default), whether it fits, the op
that sets the floor after, how many ops were split, the simulated host peak (swapped tensors
and split ops' host arrays: what `lms.check_host_memory` checks), and the time analysis and
tuning took against the trace. Simulation only (`LMS.plan_only`, calibration off): nothing
runs a step. What the plans measure when they run: `inv run --spec split-reach` (limits) and
benchmarks/lms_split_cost.py (cost).

    .venv/bin/python benchmarks/lms_split.py                       # the recorded cases
    .venv/bin/python benchmarks/lms_split.py googlenet 512 16 300MiB
    .venv/bin/python benchmarks/lms_split.py MobileNetV2 2048 1 400MiB   # a Keras application
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from lms_cases import named_case  # noqa: E402

import lms  # noqa: E402

CASES = [
    ("resnet50", 1024, 1, "400MiB"),
    ("googlenet", 2048, 1, "400MiB"),
    ("googlenet", 1024, 1, "150MiB"),
    ("googlenet", 512, 16, "300MiB"),
]
MiB = 2**20


def measure(name: str, resolution: int, batch: int, device_memory: str) -> None:
    case = named_case(name, resolution, batch)
    args = (case.step, case.images, case.labels)
    for split in ("off", "auto"):
        planner = lms.LMS(device_memory=device_memory, calibration_steps=0, split=split)
        report = planner.plan_only(*args)
        timings = report.timings_s
        print(
            f"{name} {resolution}² b{batch} in {device_memory} (budget "
            f"{report.budget_bytes / MiB:.0f} MiB), split={split}: best peak "
            f"{report.peak_bytes_with_lms / MiB:.1f} MiB, fits {report.fits}, "
            f"{len(report.splits or ())} ops split, floor {report.analysis.floor_op.name} "
            f"({report.analysis.floor_op.bytes / MiB:.0f} MiB), host peak "
            f"{report.host_peak_bytes / MiB:.1f} MiB, analysis and tuning "
            f"{timings.get('tune_s', 0) + timings.get('analysis_s', 0):.2f} s, trace "
            f"{timings.get('trace_s', 0):.2f} s",
            flush=True,
        )


def main(argv: list[str]) -> None:
    if argv:
        name, resolution, batch, memory = argv
        measure(name, int(resolution), int(batch), memory)
        return
    for case in CASES:
        measure(*case)


if __name__ == "__main__":
    main(sys.argv[1:])
