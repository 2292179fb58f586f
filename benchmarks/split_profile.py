"""Where a split step's time goes on the emulated device (issue 44 item 3): one step of a
suite workload (or a Keras application) wrapped by `lms.LMS(device_memory)` with the closed loop
off (the first plan kept) unless asked, profiled once after two steps; its ops' times summed by
kind: the pieces' host copies, the pieces' compute by op type, the swaps, and the step's other
ops.
The profile's busy time is the ops' durations added (both cores), beside the step's makespan.

    TF_CPU_ALLOCATOR_USE_BFC=true .venv/bin/python benchmarks/split_profile.py \\
        googlenet 2048 400MiB [chained|alone] [loop]

"loop": with the closed loop (its plans measured and corrected until one holds), for a step
whose first plan does not fit (the 3D U-Net 144³ in 400 MiB).
"""

import collections
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from lms_cases import named_case  # noqa: E402

import lms  # noqa: E402
from lms.graph.names import SPLIT_SCOPE, SWAP_SCOPE, transfer_kind  # noqa: E402


def kind(event) -> str:
    moves = transfer_kind(event.name)
    if moves and "lms_piece" in event.name:
        return f"piece copy {moves}"
    if moves:
        return f"swap {moves}"
    if event.name.startswith(f"{SPLIT_SCOPE}/"):
        return f"piece compute {event.type}"
    if event.name.startswith(f"{SWAP_SCOPE}/"):
        return "swap, other ops"
    return f"step op {event.type}"


def main(workload: str, resolution: str, memory: str, chains: str = "chained", loop="") -> None:
    case = named_case(workload, int(resolution), 1)
    calibration = {} if loop == "loop" else {"calibration_steps": 0}
    planner = lms.LMS(device_memory=memory, split_chains=chains != "alone", **calibration)
    step = planner.wrap(case.step)
    for _ in range(2):
        step(case.images, case.labels)
    while step.calibrating:  # with the closed loop: until it keeps a plan
        step(case.images, case.labels)
    profile, _ = step.profile(case.images, case.labels)
    seconds, count = collections.Counter(), collections.Counter()
    for event in profile.ops:
        if "__inference" in event.type or "__inference" in event.name:
            continue  # the function call itself
        seconds[kind(event)] += event.duration
        count[kind(event)] += 1
    busy = sum(seconds.values())
    splits = len(planner.report.splits or ())
    print(
        f"{workload} {resolution}² b1 {memory} {chains}, {splits} ops split: makespan "
        f"{profile.makespan:.2f} s, ops busy {busy:.2f} s"
    )
    for name, value in seconds.most_common(15):
        print(f"  {value:7.2f} s {100 * value / busy:5.1f} % {count[name]:6d}  {name}")


if __name__ == "__main__":
    main(*sys.argv[1:])
