"""Run by test_calibration in a fresh process: the closed loop on a small CNN while the program
holds a tensor on the emulated device that the step's simulation cannot know about (as a user's
evaluation batch or second model would). Prints one JSON object: the loop's calibration, the
measured peaks of the steps after it, whether other work's peak between steps made it plan
again, and what a second LMS with the same calibration cache planned for.

Usage: _lms_loop.py DEVICE_MIB HELD_MIB CACHE_PATH [CALIBRATION_STEPS]"""

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402
from lms_cases import Case, small_cnn  # noqa: E402

import lms  # noqa: E402

MiB = 2**20


def peak_of(function, case) -> int:
    tf.config.experimental.reset_memory_stats("CPU:0")
    float(function(case.images, case.labels))
    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


def main(device_mib: float, held_mib: float, cache: str, calibration_steps: int = 3) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    case = Case(*small_cnn(resolution=160, batch=8, layers=6))
    held = tf.ones((int(held_mib * MiB) // 4,), tf.float32)  # lives outside every step
    options = dict(
        device_memory=int(device_mib * MiB),
        safety_ratio=1.0,
        calibration_steps=calibration_steps,
        calibration_cache=cache or None,
        max_corrections=4,
    )
    planner = lms.LMS(**options)
    step = planner.wrap(case.step)
    result = {"error": None, "calibrating_steps": 0}
    try:
        while step.calibrating or not result["calibrating_steps"]:
            float(step(case.images, case.labels))
            result["calibrating_steps"] += 1
        # the loop as it was when it accepted a plan (later steps may re-plan)
        result["at_acceptance"] = json.loads(json.dumps(planner.report.calibration))
        result["swaps_at_acceptance"] = planner.report.swapped_tensors
        result["after"] = [peak_of(step, case) for _ in range(3)]
        # other work between steps sets a peak over the device; the accepted plan's steps
        # after it set none of their own, so the loop leaves the plan alone
        if planner.report.calibration is not None:  # the loop is on
            attempts = len(planner.report.calibration["attempts"])
            for _ in range(2):
                other = tf.ones((int(device_mib * 1.5 * MiB) // 4,), tf.float32)
                del other
                float(step(case.images, case.labels))
            replans = len(planner.report.calibration["attempts"]) - attempts
            result["replans_after_other_work"] = replans
    except lms.NothingFitsError as error:
        result["error"] = str(error)
    result["calibration"] = planner.report.calibration if planner.report else None
    result["budget"] = planner.budget
    # a second LMS on the same step and device reads the cache: it starts where the loop ended
    again = lms.LMS(**options)
    second = again.wrap(case.step)
    if result["error"] is None:
        float(second(case.images, case.labels))
        result["second"] = again.report.to_dict()
    result["held"] = int(held.shape[0]) * 4
    print(json.dumps(result))


if __name__ == "__main__":
    main(float(sys.argv[1]), float(sys.argv[2]), sys.argv[3], *map(int, sys.argv[4:]))
