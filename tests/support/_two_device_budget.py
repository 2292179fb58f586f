"""Run by tests/lms/device/test_target.py in a fresh process: the two-device mode's budgets. Two
logical CPU devices are made before TensorFlow starts; the step computes on /CPU:1.

Prints one JSON object: the compute device's pool as TensorFlow reports it, the devices the
step's ops ran on, and what a plan over the pinned allocator's cap (TF_GPU_HOST_MEM_LIMIT_IN_MB,
set by the test) raised."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402

import lms  # noqa: E402

lms.use_two_devices()
from lms_cases import Case, small_cnn  # noqa: E402

from lms.device.target import device_pool_bytes, resolve_target  # noqa: E402


def main() -> None:
    with tf.device("/CPU:1"):
        case = Case(*small_cnn(resolution=48, batch=4, layers=4))
    everything = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0}
    target = resolve_target("two-device")
    result = {
        "kind": target.kind,
        "compute": target.compute_device,
        "meter": target.meter_device,
        "pool": {name: device_pool_bytes(name) for name in ("CPU:0", "CPU:1")},
        "pinned": target.pinned_host_bytes(),
    }
    planner = lms.LMS("1MiB", mechanism="two-device", split="off", **everything)
    step = planner.wrap(case.step)
    try:
        step(case.images, case.labels)
        result["raised"] = None
    except lms.HostMemoryError as error:
        result["raised"] = str(error)
    unchecked = lms.LMS("1MiB", mechanism="two-device", split="off", host_memory=None, **everything)
    step = unchecked.wrap(case.step)
    step(case.images, case.labels)
    report = lms.check_step(step, case.images, case.labels)
    result["ran_on"] = sorted({device.rsplit("device:", 1)[-1] for device in report.ran.values()})
    result["host_peak"] = unchecked.report.host_peak_bytes
    print(json.dumps(result))


if __name__ == "__main__":
    main()
