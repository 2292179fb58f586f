"""Does a disk take the host arrays RAM cannot (issue 44 item 4, `LMS(host_disk=...)`)? One case
on the emulated device, each run in a fresh process:

- "RAM": no memory limit, no disk: the step time and what the host store holds (the baseline);
- "limited": in a memory cgroup of `--memory` (as a container with `--memory` runs), no disk:
  LMS refuses the plan before its step runs (HostMemoryError), the RAM-bound limit;
- "limited + disk": the same cgroup with `host_disk` a directory on this machine's disk: the
  step trains; its time, the store's RAM limit and disk peak, the cgroup's peak usage, and the
  bytes the process read from and wrote to the disk (/proc/self/io) per step.

Needs root and cgroup v1's memory controller (/sys/fs/cgroup/memory), as tests/lms/device/
test_host_memory.py's cgroup test; elsewhere the limited runs say why they did not run.

`--memory none`: no cgroup, the machine's own memory: "RAM" then is the plan refused for what
the whole machine has, and "disk" the step past it (a case whose host peak is over the
machine's RAM: the 3D U-Net 192³ b1 in 1 GiB holds 22 GiB on the host).

    python benchmarks/lms_host_disk.py resnet50 1024 1 400MiB --memory 2.5GiB [--steps 2]
    python benchmarks/lms_host_disk.py unet3d 192 1 1GiB --memory none --steps 1 --fixed
"""

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CGROUPS = Path("/sys/fs/cgroup/memory")
MiB = 2**20


def _disk_io() -> tuple[int, int]:
    """Bytes this process read from and wrote to storage so far (/proc/self/io)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["read_bytes"]), int(fields["write_bytes"])


def child(case_args: list, steps: int, group: str | None, disk: str | None, fixed=False) -> dict:
    """One run (module docstring), in this process, joining the cgroup `group` first."""
    if group:
        (Path(group) / "cgroup.procs").write_text(str(os.getpid()))
    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("lms").setLevel(logging.INFO)  # says how much of the plan goes to the disk
    sys.path[:0] = [str(ROOT), str(ROOT / "tests" / "support")]
    from lms_cases import named_case

    import lms

    name, resolution, batch, device_memory = case_args
    case = named_case(name, int(resolution), int(batch))
    calibration = {"calibration_steps": 0} if fixed else {}  # --fixed: the first plan kept
    planner = lms.LMS(device_memory=device_memory, host_disk=disk, **calibration)
    step = planner.wrap(case.step)
    try:
        step.prepare(case.images, case.labels)
        step(case.images, case.labels)
        while step.calibrating:  # the closed loop's steps: not timed
            step(case.images, case.labels)
    except lms.HostMemoryError as error:
        return {"refused": str(error)}
    planner.store.arrays.take_disk_peak()
    read, written = _disk_io()
    started = time.perf_counter()
    for _ in range(steps):
        step(case.images, case.labels)
    seconds = (time.perf_counter() - started) / steps
    read_after, written_after = _disk_io()
    report = planner.report
    arrays = planner.store.arrays
    result = {
        "step_s": seconds,
        "host_simulated_mib": report.host_peak_bytes / MiB,
        "store_held_mib": planner.store.take_peak() / MiB,
        "ram_limit_mib": None if arrays.ram_limit_bytes is None else arrays.ram_limit_bytes / MiB,
        "disk_peak_mib": arrays.take_disk_peak() / MiB,
        "disk_read_mib_per_step": (read_after - read) / MiB / steps,
        "disk_written_mib_per_step": (written_after - written) / MiB / steps,
        "splits": len(report.splits or ()),
    }
    if arrays.disk is not None:  # the disk as a link (measured when the plan spilled)
        disk = arrays.disk_link
        result["disk_write_gb_s"], result["disk_read_gb_s"] = (
            disk.out_bandwidth / 1e9,
            disk.bandwidth / 1e9,
        )
    if group:
        result["cgroup_peak_mib"] = int((Path(group) / "memory.max_usage_in_bytes").read_text())
        result["cgroup_peak_mib"] /= MiB
    return result


def _run(case_args, steps, memory: int | None, disk: str | None, fixed=False) -> dict:
    """`child` in a fresh process, in a new memory cgroup of `memory` bytes when given."""
    group = None
    if memory is not None:
        group = CGROUPS / f"lms-host-disk-{os.getpid()}-{time.monotonic_ns()}"
        try:
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(memory))
        except OSError as error:
            return {"not run": f"no memory cgroup here ({error}): needs root and cgroup v1"}
    command = [sys.executable, __file__, *case_args, "--steps", str(steps), "--child"]
    if group:
        command += ["--group", str(group)]
    if disk:
        command += ["--disk", disk]
    if fixed:
        command.append("--fixed")
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    try:
        done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT)
    finally:
        if group:
            with contextlib.suppress(OSError):
                group.rmdir()
    if done.returncode != 0:
        return {"failed": f"exit {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("case", nargs=4, help="NAME RESOLUTION BATCH DEVICE_MEMORY")
    parser.add_argument(
        "--memory", default="2.5GiB", help="the cgroup's memory limit; none: no cgroup"
    )
    parser.add_argument("--steps", type=int, default=2, help="timed steps per run")
    parser.add_argument(
        "--fixed", action="store_true", help="the first plan kept: no closed loop's steps"
    )
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    parser.add_argument("--disk", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.case, args.steps, args.group, args.disk, args.fixed)))
        return
    sys.path.insert(0, str(ROOT))
    from lms.values.budget import parse_size

    memory = None if args.memory == "none" else parse_size(args.memory, "--memory")
    runs = {}
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".host-disk-") as disk:
        plan = (("RAM", None, None), ("limited", memory, None), ("limited + disk", memory, disk))
        if memory is None:  # the machine's own memory: the RAM run is the RAM-bound one
            plan = (("RAM", None, None), ("disk", None, disk))
        for number, (name, limit, directory) in enumerate(plan, 1):
            print(f"run {number} of {len(plan)}: {name}", flush=True)
            runs[name] = _run(args.case, args.steps, limit, directory, args.fixed)
            print(f"  {json.dumps(runs[name])}", flush=True)
    ram, disk_run = runs["RAM"], runs[plan[-1][0]]
    if "step_s" in ram and "step_s" in disk_run:
        print(
            f"{' '.join(args.case)} in {args.memory}: step on the disk / in RAM "
            f"{disk_run['step_s'] / ram['step_s']:.2f} ({disk_run['step_s']:.1f} s against "
            f"{ram['step_s']:.1f} s)"
        )
        # the model's floor (lms/device/host_arrays.py `HostArrays.allow`): the disk peak written
        # once and read back once at the disk's measured speed, against what the disk added
        peak = disk_run["disk_peak_mib"] * MiB
        floor = peak / (disk_run["disk_write_gb_s"] * 1e9) + peak / (
            disk_run["disk_read_gb_s"] * 1e9
        )
        write, read = disk_run["disk_write_gb_s"], disk_run["disk_read_gb_s"]
        print(
            f"  the disk added {disk_run['step_s'] - ram['step_s']:.1f} s a step; moving its peak "
            f"once each way at {write:.2f} / {read:.2f} GB/s takes {floor:.1f} s"
        )


if __name__ == "__main__":
    main()
