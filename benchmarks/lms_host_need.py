"""How much host memory a step with LMS needs, simulated against measured (issue 31: split steps
were killed by the kernel's OOM killer at 12-17 GB where nothing said so beforehand). For each
case, in a fresh process on the emulated device: the plan's simulated host peak (swapped
tensors and split ops' host arrays), the most bytes the host store held over the closed loop's
steps and two more, and the growth of the process's resident memory over them from where the
plan was made (sampled every 2 ms) against what `lms.device.host_memory` checks before a step runs
(host peak plus the emulated device's peak: its buffers are host memory too).

    .venv/bin/python benchmarks/lms_host_need.py                          # the recorded cases
    .venv/bin/python benchmarks/lms_host_need.py resnet50 1024 1 400MiB
    .venv/bin/python benchmarks/lms_host_need.py MobileNetV2 2048 1 400MiB   # a Keras application
    .venv/bin/python benchmarks/lms_host_need.py resnet50 1024 1 400MiB --no-loop --steps 12
"""

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CASES = [
    ("resnet50", 1024, 1, "400MiB"),
    ("googlenet", 2048, 1, "400MiB"),
    ("MobileNetV2", 2048, 1, "400MiB"),
    ("unet3d", 96, 1, "400MiB"),
]
MiB = 2**20


def measure(name: str, resolution: int, batch: int, device_memory: str, loop=True, steps=2) -> dict:
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]
    import psutil
    from lms_cases import named_case

    import lms
    from lms.device.host_memory import host_need

    case = named_case(name, resolution, batch)
    planner = lms.LMS(device_memory=device_memory, **({} if loop else {"calibration_steps": 0}))
    step = planner.wrap(case.step)
    step.prepare(case.images, case.labels)  # planned: where lms checks the host's memory
    process, peak, stop = psutil.Process(), [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            stop.wait(0.002)

    planner.store.take_peak()
    before = process.memory_info().rss
    sampler = threading.Thread(target=sample)
    sampler.start()
    step(case.images, case.labels)
    while step.calibrating:  # the closed loop's steps, then two with the plan it kept
        step(case.images, case.labels)
    for _ in range(steps):
        step(case.images, case.labels)
    stop.set()
    sampler.join()
    report = planner.report
    return {
        "simulated_host": report.host_peak_bytes,
        "simulated_device": report.peak_bytes_with_lms,
        "simulated_sum": report.host_peak_bytes + report.peak_bytes_with_lms,
        "checked": host_need(report.host_peak_bytes, report.peak_bytes_with_lms, emulated=True),
        "store_peak": planner.store.take_peak(),
        "rss_growth": peak[0] - before,
        "splits": len(report.splits or ()),
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs="*", help="NAME RESOLUTION BATCH DEVICE_MEMORY")
    parser.add_argument("--no-loop", action="store_true", help="calibration_steps=0")
    parser.add_argument("--steps", type=int, default=2, help="steps after the loop's")
    args = parser.parse_args(argv)
    if args.case and len(args.case) != 4:
        parser.error("a case is NAME RESOLUTION BATCH DEVICE_MEMORY")
    cases = CASES
    if args.case:
        cases = [(args.case[0], int(args.case[1]), int(args.case[2]), args.case[3])]
    for name, resolution, batch, memory in cases:
        call = f"{name!r}, {resolution}, {batch}, {memory!r}, {not args.no_loop}, {args.steps}"
        code = (
            f"import json, sys; sys.path.insert(0, {str(ROOT)!r}); "
            "from benchmarks.lms_host_need import measure; "
            f"print(json.dumps(measure({call})))"
        )
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if done.returncode:
            sys.exit(f"{name}: {done.stderr[-2000:]}")
        r = json.loads(done.stdout.strip().splitlines()[-1])
        print(
            f"{name} {resolution}{'³' if '3d' in name else '²'} b{batch} in {memory}, "
            f"{r['splits']} ops split: host simulated "
            f"{r['simulated_host'] / MiB:.1f} MiB, store held {r['store_peak'] / MiB:.1f} MiB "
            f"({r['store_peak'] / max(r['simulated_host'], 1):.2f}x); process grew "
            f"{r['rss_growth'] / MiB:.1f} MiB over its steps, "
            f"{r['rss_growth'] / max(r['simulated_sum'], 1):.2f}x the simulated host and device "
            f"peaks ({r['simulated_sum'] / MiB:.1f} MiB); lms checks {r['checked'] / MiB:.1f} "
            f"MiB ({r['rss_growth'] / max(r['checked'], 1):.2f}x)",
            flush=True,
        )


if __name__ == "__main__":
    main(sys.argv[1:])
