"""What splitting costs when it is not needed (issue 31): one step of a model at a size that
trains without LMS, plain against the same step with its largest ops forced into pieces
(`LMS(split={name: pieces})`, nothing swapped: the plan fits without LMS), timed interleaved in
one process, and the same model with lms's default (`split="auto"`), which must split nothing
when the step fits.

    .venv/bin/python benchmarks/lms_split_cost.py [workload] [resolution] [batch] [ops] [pieces]
    .venv/bin/python benchmarks/lms_split_cost.py googlenet 512 1 3 4

Prints the split ops, then per repeat the two step times and their ratio, then the median ratio
and its spread (min-max) over the repeats. The cost of a step that needed splitting is in the
limits table of `inv run --spec split-reach`: its rate at the limit with splitting against the
rate at the largest size that trains without LMS.
"""

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from lms_cases import workload_case  # noqa: E402

import lms  # noqa: E402
from lms.split.layouts import splittable  # noqa: E402
from lms.split.rewrite import running_ops  # noqa: E402

REPEATS = 7


def largest_ops(step, images, labels, count: int) -> list[str]:
    graph = step.get_concrete_function(images, labels).graph
    running, sizes = running_ops(graph), []
    for op in graph.get_operations():
        if op in running and splittable(op) is None:
            tensors = (*op.inputs, *op.outputs)
            sizes.append((sum(t.shape.num_elements() * t.dtype.size for t in tensors), op.name))
    return [name for _, name in sorted(sizes, reverse=True)[:count]]


def seconds(function, case) -> float:
    started = time.perf_counter()
    float(function(case.images, case.labels))
    return time.perf_counter() - started


def main(workload="googlenet", resolution="512", batch="1", ops="3", pieces="4") -> None:
    case = workload_case(workload, int(resolution), int(batch))
    names = largest_ops(case.step, case.images, case.labels, int(ops))
    default = lms.LMS(device_memory="64GiB", calibration_steps=0)
    default.wrap(case.step)(case.images, case.labels)
    print(f"default split={default.options.split!r}, step fits: {len(default.report.splits)} split")
    case = workload_case(workload, int(resolution), int(batch))  # a fresh trace to split
    planner = lms.LMS(
        device_memory="64GiB", calibration_steps=0, split=dict.fromkeys(names, int(pieces))
    )
    split = planner.wrap(case.step)
    plain = workload_case(workload, int(resolution), int(batch))
    for function in (plain.step, split):  # warm up: plan, trace, Grappler, first allocations
        seconds(function, plain)
        seconds(function, plain)
    for split_op in planner.report.splits:
        print(f"split {split_op['op']} ({split_op['op_type']}) into {split_op['pieces']}")
    ratios = []
    for repeat in range(REPEATS):
        whole, pieces_ = seconds(plain.step, plain), seconds(split, plain)
        ratios.append(pieces_ / whole)
        print(f"repeat {repeat + 1}: plain {whole:.3f} s, split {pieces_:.3f} s, {ratios[-1]:.3f}x")
    print(
        f"{workload} {resolution}² b{batch}, {len(names)} largest ops in {pieces} pieces: "
        f"split / plain step time {statistics.median(ratios):.3f}x "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}, {REPEATS} interleaved repeats)"
    )


if __name__ == "__main__":
    main(*sys.argv[1:])
