"""Child of test_allocator.py: every allocation TensorFlow's CPU BFC allocator made while a small
CNN was built and trained three steps (profiler trace), with the allocator's own peak.

Prints one JSON line: {"peak": bytes, "events": [[kind, address, requested, chunk], ...]} in time
order (kind 1 allocation, 0 deallocation). Needs TF_CPU_ALLOCATOR_USE_BFC=true.
"""

import glob
import json
import sys
import tempfile

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
from lms_cases import Case, small_cnn  # noqa: E402


def allocator_events(logdir: str) -> list:
    path = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[-1]
    space = xplane_pb2.XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    plane = next(p for p in space.planes if p.name == "/host:CPU")
    names, stats = plane.event_metadata, plane.stat_metadata
    events = []
    for line in plane.lines:
        for event in line.events:
            kind = names[event.metadata_id].name
            if kind not in ("MemoryAllocation", "MemoryDeallocation"):
                continue
            values = {
                stats[s.metadata_id].name: s.int64_value or s.uint64_value for s in event.stats
            }
            time_ps = line.timestamp_ns * 1000 + event.offset_ps
            events.append(
                (
                    time_ps,
                    int(kind == "MemoryAllocation"),
                    values.get("addr", 0),
                    values.get("requested_bytes", 0),
                    values.get("allocation_bytes", 0),
                )
            )
    events.sort(key=lambda e: e[0])
    return [list(e[1:]) for e in events]


def main() -> None:
    logdir = tempfile.mkdtemp()
    tf.profiler.experimental.start(logdir)
    case = Case(*small_cnn(resolution=64, batch=4, layers=4))
    for _ in range(3):
        float(case.step(case.images, case.labels))
    peak = tf.config.experimental.get_memory_info("CPU:0")["peak"]
    tf.profiler.experimental.stop()
    print(json.dumps({"peak": peak, "events": allocator_events(logdir)}))


if __name__ == "__main__":
    main()
