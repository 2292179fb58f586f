"""Run by tests/lms/test_api.py in a fresh process: the allocator's peak must not include what
other tests left behind. Prints one JSON object: measured peaks without and with auto-tuned LMS
(the plan's report as a record holds it), and one training step's updates with each."""

import json
import logging
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402
from lms_cases import Case, small_cnn, step_update  # noqa: E402

import lms  # noqa: E402


def measured_peak(function, case, steps=2):
    float(function(case.images, case.labels))
    tf.config.experimental.reset_memory_stats("CPU:0")
    for _ in range(steps):
        float(function(case.images, case.labels))
    return tf.config.experimental.get_memory_info("CPU:0")["peak"]


def main(plot_path: str) -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    case = Case(*small_cnn(resolution=160, batch=8, layers=6))
    plain = measured_peak(case.step, case)
    device_memory = int(plain * 0.9)
    planner = lms.LMS(device_memory=device_memory, plot=plot_path)
    wrapped = planner.wrap(case.step)
    measured = measured_peak(wrapped, case)
    updates = {}
    for name, function in (("plain", case.step), ("lms", wrapped)):
        loss, momentums, _ = step_update(case, function)
        updates[name] = (loss, [m.tolist() for m in momentums])
    print(
        json.dumps(
            {
                "plain": plain,
                "device_memory": device_memory,
                "budget": planner.budget,
                "measured": measured,
                "report": planner.report.to_dict(),
                "update_plain": updates["plain"],
                "update_lms": updates["lms"],
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
