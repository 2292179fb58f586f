"""One process of `inv gpucheck` (suite/running/gpucheck.py): runs the part of a check its
request names and writes what it found.

`python -m suite.running.gpucheck_worker REQUEST.json ANSWER.json [--parent PID]`: the request
names the part ("placement", "timing", "memory", "grappler", "split", "pinned"), the mode ("gpu"
or "two-device") and the part's options; the answer holds its findings (lines), its failures
(from gpucheck_judges.py), the GPU-only parts it did not run and why, and its data. A fresh
process per part: the two-device mode must split the CPU before TensorFlow runs anything, a
measured peak must hold nothing of another part's, and the pinned host cap is read when
TensorFlow starts.

This module is the process's entry: the request in, the mode set up, the answer out. The step
every part builds is gpucheck_case.py; the parts, gpucheck_parts.py (checks a to d) and
gpucheck_split.py (check e).
"""

import json
import sys
import time
from pathlib import Path

from suite.records.files import write_atomic
from suite.running.gpucheck_parts import grappler, memory, placement, timing
from suite.running.gpucheck_split import pinned, split
from suite.running.orphan_guard import child_arguments

PARTS = {
    "placement": placement,
    "timing": timing,
    "memory": memory,
    "grappler": grappler,
    "split": split,
    "pinned": pinned,
}


def main(argv: list[str]) -> int:
    request_path, answer_path = child_arguments(
        argv, "python -m suite.running.gpucheck_worker", "request_path", "answer_path"
    )
    request = json.loads(Path(request_path).read_text())
    mode = request["mode"]
    import lms

    if mode == "two-device":
        lms.use_two_devices()  # before TensorFlow runs anything
    import tensorflow as tf

    started = time.perf_counter()
    if mode == "gpu" and not tf.config.list_physical_devices("GPU"):
        answer = {
            "fatal": "--mode gpu: TensorFlow sees no GPU (a CPU build of TensorFlow, or "
            "CUDA_VISIBLE_DEVICES hides it); install the CUDA build (bash scripts/venv.sh .venv "
            "gpu) or run --mode two-device"
        }
    else:
        options = {k: v for k, v in request.items() if k not in ("check", "part", "mode")}
        answer = PARTS[request["part"]](mode, **options)
    answer.update(tensorflow_version=tf.__version__, seconds=time.perf_counter() - started)
    write_atomic(answer_path, json.dumps(answer, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
