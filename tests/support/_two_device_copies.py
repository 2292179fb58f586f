"""Run by tests/lms/observe/test_copy_events.py, tests/lms/values/test_link.py and
tests/suite/hosts/test_link.py in a fresh process: TensorFlow's send/recv pairs between two
logical CPU devices (lms.use_two_devices(), before TensorFlow runs anything), named as on a GPU.

`swaps` (default): a small conv step with everything swapped, mechanism "two-device", run once;
then one step with run metadata (lms/observe/copy_match.py reads the pairs' names), one profiled
(`LMSFunction.profile`) and the step-time model on it. `round-trip`: suite/hosts/link.py's copy
functions on /CPU:1 and /CPU:0, with the partitions they ran and a measurement on them.
Prints one JSON object."""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import tensorflow as tf  # noqa: E402

import lms  # noqa: E402

lms.use_two_devices()


def swaps() -> dict:
    from lms_cases import Case, small_cnn

    from lms.observe.copy_match import copy_names, swap_copy_pairs
    from lms.timing.steptime import project, seen_transfers
    from lms.values.link import Link

    with tf.device("/CPU:1"):
        case = Case(*small_cnn(resolution=32, batch=2, layers=3))
    planner = lms.LMS(
        "2MiB",
        mechanism="two-device",
        split="off",
        host_memory=None,
        swapout_threshold=1,
        swapin_ahead=1,
        swapin_groupby=0,
    )
    step = planner.wrap(case.step)
    args = (case.images, case.labels)
    step(*args)
    metadata = step.run_metadata(*args)
    pairs = swap_copy_pairs(metadata)
    profile, graph = step.profile(*args)
    seen = seen_transfers(profile, graph)
    makespan = profile.makespan
    report = planner.report
    return {
        "planned": {"out": report.swapped_tensors, "in": report.swap_ins},
        "transfers": {name: list(t) for name, t in graph.transfers.items()},
        "gates": {name: list(g) for name, g in graph.gates.items()},
        "types": {op.name: op.type for op in step.prepare(*args)[0].graph.get_operations()},
        "pairs": {name: vars(pair) for name, pair in pairs.items()},
        "names": {name: list(found) for name, found in copy_names(metadata).items()},
        "events": [[e.name, e.type, e.start, e.duration] for e in profile.ops],
        "seen": seen,
        "makespan": makespan,
        "projected_10MBps": project(profile, graph, Link(10e6), makespan).step_seconds,
        "waits_10MBps": project(profile, graph, Link(10e6), makespan).waits,
        "traffic": step.traffic().to_dict(),
    }


def round_trip() -> dict:
    from lms import _tf_private
    from suite.hosts.link import copy_functions, measure_gpu_copies

    round_trip, _, _ = copy_functions("/device:CPU:1")
    with tf.device("/CPU:1"):
        x = tf.ones([1024], tf.float32)
    round_trip(x)
    with _tf_private.run_metadata() as found:
        on_host, back = tf.function(round_trip.python_function)(x)
    partitions = [
        {
            "device": p.node[0].device if p.node else "",
            "nodes": [
                {
                    "name": n.name,
                    "op": n.op,
                    "input": list(n.input),
                    "tensor_name": n.attr["tensor_name"].s.decode(),
                }
                for n in p.node
            ],
        }
        for fg in found[0].function_graphs
        for p in fg.partition_graphs
    ]
    measured = measure_gpu_copies(0, sizes=(2**20, 2**22), device="/device:CPU:1")
    return {
        "partitions": partitions,
        "devices": [on_host.device, back.device],
        "measured": measured,
    }


if __name__ == "__main__":
    mode = sys.argv[1] if len(sys.argv) > 1 else "swaps"
    print(json.dumps({"swaps": swaps, "round-trip": round_trip}[mode]()))
