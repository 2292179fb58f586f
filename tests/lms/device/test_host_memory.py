"""lms/device/host_memory.py and the simulator's host curve: a split step's host arrays are counted
(the host store's measured peak is the simulated one), and a plan that needs more host memory than
the host has raises HostMemoryError before its step runs, not the kernel's OOM killer after.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import contextlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from lms_cases import Case, small_cnn

import lms
from lms.device.host_memory import available_bytes, check_host_memory, host_need
from lms.errors import HostMemoryError, ParameterError

pytestmark = pytest.mark.compat
ROOT = Path(__file__).resolve().parents[3]

SPLIT = {"Conv2D": 2, "Relu": 3, "Conv2DBackpropInput": 2}


def _case():
    return Case(*small_cnn(resolution=48, batch=2, layers=4))


@pytest.mark.parametrize("swapped", [False, True], ids=["split only", "split and swapped"])
def test_the_host_store_holds_at_most_what_the_simulation_says(swapped):
    case = _case()
    swaps = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0} if swapped else {}
    planner = lms.LMS(device_memory="1TiB", calibration_steps=0, split=SPLIT, **swaps)
    step = planner.wrap(case.step)
    step(case.images, case.labels)  # plans and runs: the store's peak is this step's
    report = planner.report
    held = planner.store.take_peak()
    without_splits = lms.LMS(device_memory="1TiB", calibration_steps=0, split="off", **swaps)
    plain = without_splits.plan_only(case.step, case.images, case.labels)
    assert len(report.splits) >= 8
    assert report.host_peak_bytes > plain.host_peak_bytes  # the pieces' host arrays count
    # equal in 35 of 36 runs here (both kernel sets); once the executor, running two ops at a
    # time, held a third array where the simulated order holds two (1.5x)
    assert report.host_peak_bytes / 2 <= held <= 2 * report.host_peak_bytes
    assert planner.store.held_bytes == 0


def test_a_plan_needing_more_host_memory_than_given_raises_before_its_step_runs():
    case = _case()
    planner = lms.LMS(device_memory="1GiB", calibration_steps=0, split=SPLIT, host_memory="1MiB")
    step = planner.wrap(case.step)
    before = [v.numpy() for v in case.model.trainable_variables]
    with pytest.raises(HostMemoryError) as raised:
        step(case.images, case.labels)
    message = str(raised.value)
    assert message.startswith("host memory: the plan holds")
    assert "over the 1.00 MiB of host memory given (LMS option host_memory)" in message
    assert raised.value.available == 2**20
    assert raised.value.need > 2**20
    after = [v.numpy() for v in case.model.trainable_variables]
    assert all((a == b).all() for a, b in zip(before, after, strict=True))  # nothing ran


def test_the_default_checks_what_is_available_and_the_step_trains():
    case = _case()
    planner = lms.LMS(device_memory="1GiB", calibration_steps=0, split=SPLIT)
    assert planner.options.host_memory == "auto"
    planner.wrap(case.step)(case.images, case.labels)
    report = planner.report
    need = host_need(report.host_peak_bytes, report.peak_bytes_with_lms, emulated=True)
    assert 0 < need < available_bytes()


def test_the_check_compares_the_need_with_the_limit():
    check_host_memory(10 * 2**20, 2**30, emulated=False, limit=None)  # no check
    check_host_memory(10 * 2**20, 2**30, emulated=False, limit=14 * 2**20)  # a GPU: host only
    with pytest.raises(HostMemoryError, match=r"over the 12.0 MiB of host memory given"):
        check_host_memory(10 * 2**20, 2**30, emulated=False, limit=12 * 2**20)  # 1.3 x 10 MiB
    with pytest.raises(HostMemoryError, match=r"and the emulated device's 1.00 GiB, .* 1.31 GiB"):
        check_host_memory(10 * 2**20, 2**30, emulated=True, limit=2**30)
    available = available_bytes()
    assert available is None or available > 0
    with pytest.raises(HostMemoryError, match="available now"):
        check_host_memory(2**62, 0, emulated=False, limit="auto")


@pytest.mark.parametrize("bad", ["lots", 1.5, -5, True])
def test_a_wrong_host_memory_names_the_option(bad):
    with pytest.raises(ParameterError, match="host_memory"):
        lms.LMS(device_memory="1GiB", host_memory=bad)


def test_a_process_in_a_memory_limited_cgroup_sees_the_room_its_limit_leaves(tmp_path):
    """A real cgroup (v1, as root; skipped elsewhere): a process that joins a 2 GiB memory
    cgroup, as a container with --memory 2g runs, has at most 2 GiB available, and lms refuses a
    plan that needs more before its step runs."""
    group = Path("/sys/fs/cgroup/memory") / f"lms-host-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(2 * 2**30))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here ({error}): needs root and cgroup v1")
    code = (
        "import os, sys\n"
        f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        "from lms.device.host_memory import available_bytes, check_host_memory\n"
        "from lms.errors import HostMemoryError\n"
        "print(available_bytes())\n"
        "try:\n"
        "    check_host_memory(2 * 2**30, 0, emulated=False, limit='auto')\n"
        "except HostMemoryError as error:\n"
        "    print(error)\n"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
        )
    finally:
        with contextlib.suppress(OSError):
            group.rmdir()
    available, message = done.stdout.splitlines()
    assert 1 * 2**30 < int(available) <= 2 * 2**30  # the limit less what the process uses
    assert message.startswith("host memory: the plan holds 2.00 GiB on the host")
    assert "available now (MemAvailable, or the cgroup's limit)" in message


def test_with_a_disk_the_check_gives_the_store_the_ram_beside_the_device(tmp_path):
    device, host = 100 * 2**20, 2**30
    ram = check_host_memory(host, device, emulated=True, limit=2 * device, disk=tmp_path)
    assert ram == int(0.5 * (2 * device / 1.3 - device))  # the rest of the 1 GiB: the disk
    assert check_host_memory(host, device, emulated=False, limit=2**31, disk=tmp_path) == int(
        0.5 * 2**31 / 1.3
    )
    with pytest.raises(HostMemoryError, match=r"free on the disk of .*host_memory, host_disk"):
        check_host_memory(2**62, device, emulated=True, limit=2 * device, disk=tmp_path)
    with pytest.raises(HostMemoryError, match="a disk \\(host_disk\\) holds only the host's"):
        check_host_memory(host, device, emulated=True, limit=device, disk=tmp_path)


@pytest.mark.parametrize("bad", ["/no/such/directory", 5])
def test_a_wrong_host_disk_names_the_option(bad):
    with pytest.raises(ParameterError, match="host_disk must be an existing directory"):
        lms.LMS(device_memory="1GiB", host_disk=bad)


def test_a_split_step_whose_host_arrays_pass_the_host_memory_trains_the_same_on_the_disk(
    tmp_path,
):
    """The host memory given leaves room for a quarter of the plan's host arrays beside the
    device: without a disk the plan is refused; with one the store keeps the rest there, and
    the step makes the same updates as with every array in RAM."""
    case = _case()
    options = {"device_memory": "1TiB", "calibration_steps": 0, "split": SPLIT}
    planned = lms.LMS(**options).plan_only(case.step, case.images, case.labels)
    ram = planned.host_peak_bytes // 4
    limit = int(1.3 * (planned.peak_bytes_with_lms + 2 * ram)) + 1  # half of it for the store
    with pytest.raises(HostMemoryError):
        lms.LMS(**options, host_memory=limit).wrap(case.step)(case.images, case.labels)
    in_ram = lms.LMS(**options, host_memory=None)
    on_disk = lms.LMS(**options, host_memory=limit, host_disk=tmp_path)
    updated = []
    for planner in (in_ram, on_disk):
        case.reset()
        step = planner.wrap(case.step)
        for _ in range(2):
            step(case.images, case.labels)
        updated.append([v.numpy() for v in case.model.trainable_variables])
    assert 0 < on_disk.store.arrays.ram_limit_bytes <= ram + 1
    usage = on_disk.disk_usage()  # what a program records of the disk
    assert usage.directory == str(tmp_path) and usage.peak_bytes > 0
    assert usage.write_bandwidth > 0 and usage.read_bandwidth > 0  # measured: the plan spilled
    assert on_disk.store.arrays.take_disk_peak() == usage.peak_bytes
    assert in_ram.store.arrays.take_disk_peak() == 0 and in_ram.disk_usage() is None
    assert on_disk.store.held_bytes == 0 and os.listdir(tmp_path) == []
    for a, b in zip(*updated, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
