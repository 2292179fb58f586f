"""Child of test_placement.py: LMS's GPU mechanism run for real on two logical CPU devices
(lms.use_two_devices() must come before TensorFlow runs anything, hence a fresh process). For
each item the model's step is planned and rewritten (gpu_path_cases.lms_options), run, and
checked from what TensorFlow ran:

- placement: from the run metadata of the first call (which plans, rewrites and instantiates
  the step, so its post-optimization and partition graphs are recorded; lms.observe.placement
  read_placement, what lms.check_step reads from one more step): which LMS ops survived
  Grappler and partitioning, on which device; whether each swap-in's host-to-device send is
  gated by its trigger; whether each piece's host slice waits for the piece before;
- "timing": a profiled step (lms.observe.placement.host_timing): each gated send started after its
  trigger ended;
- "replay": Grappler replayed on a virtual GPU with LMS's configuration
(lms.observe.grappler_replay);
- "equivalence": the loss and every variable's update of one step against the plain step's,
  with Grappler's arithmetic optimizer and remapper off for both (tests/lms/conftest.py says
  why). The other checks run with TensorFlow's default configuration, as a user's step does.

An item's "control" makes the rewrite wrong on purpose, to show the checks fail:
"device-swapin" places each swap-in's gated Identity on the compute device (the layout before
the desk check's B1), "unkept" keeps no LMS op from Grappler (B2; the ops made are still
listed, from the rewrite, as the planned ones).

Usage: _two_device_case.py ITEMS_JSON, a list of {"model", "plan" ("swap" or "split"),
optional "checks" (of "timing", "replay", "equivalence"; default all) and "control"}. Prints
one JSON line: {"onednn", "tensorflow", "results": [one dict per item]}.
"""

import contextlib
import json
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import lms  # noqa: E402

lms.use_two_devices()  # before anything runs

import tensorflow as tf  # noqa: E402
from gpu_path_cases import COMPUTE_DEVICE, build, lms_options  # noqa: E402
from lms_cases import step_update  # noqa: E402
from lms_equivalence import EXACT_ARITHMETIC, update_mismatches, update_tolerance  # noqa: E402
from tensorflow.core.protobuf import config_pb2  # noqa: E402

import lms.device.rewriter  # noqa: E402
from lms import _tf_private  # noqa: E402
from lms.device.copies import DeviceCopy  # noqa: E402
from lms.device.nodes import node, type_attr  # noqa: E402
from lms.observe.grappler_replay import replay  # noqa: E402
from lms.observe.placement import LMS_SCOPE, host_timing, read_placement  # noqa: E402
from lms.observe.xspace import profiled_space  # noqa: E402

CHECKS = ("timing", "replay", "equivalence")
MiB = 2**20
REPLAY_MEMORY = 64 * MiB  # the virtual GPU of the replay: below every step's static estimate


class DeviceSideSwapIn(DeviceCopy):
    """The layout the desk check found (B1): the swap-in that the trigger holds back is an
    Identity on the compute device, so the `_Recv` that copies the tensor back has no input
    and nothing holds the copy back."""

    def swap_in_nodes(self, prefix, stored, tensor):
        dtype = type_attr(tensor.dtype)
        return [node(f"{prefix}lms_swapin", "Identity", [stored], self.compute_device, T=dtype)]


class Unkept:
    """keep_from_grappler replaced: records the ops it was given, keeps none of them."""

    def __init__(self):
        self.ops = []

    def __call__(self, graph, ops):
        self.ops.extend(ops)


@contextlib.contextmanager
def unkept():
    """LMS keeps none of its ops from Grappler inside (the rewriter and the GPU's piece copies
    both call lms.device.rewriter's keep_from_grappler through its module); yields the `Unkept`
    that saw them."""
    original, recorder = lms.device.rewriter.keep_from_grappler, Unkept()
    lms.device.rewriter.keep_from_grappler = recorder
    try:
        yield recorder
    finally:
        lms.device.rewriter.keep_from_grappler = original


@contextlib.contextmanager
def grappler_options(options: dict):
    """Grappler's experimental options set inside (restored after)."""
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options(options)
    try:
        yield
    finally:
        tf.config.optimizer.set_experimental_options({k: saved.get(k, True) for k in options})


@contextlib.contextmanager
def run_metadata():
    """lms._tf_private.run_metadata, drained first: once run metadata was on in a process,
    TensorFlow goes on storing the graphs of every function instantiated later (run metadata
    off) and the next export returns them too (a previous item's steps, eager ops on the
    compute device)."""
    with _tf_private.run_metadata():
        pass
    with _tf_private.run_metadata() as found:
        yield found


def on_device(function):
    """`function` called on the compute device, as LMS calls its rewritten steps."""

    def call(*args):
        with tf.device(COMPUTE_DEVICE):
            return function(*args)

    return call


def relative(a: float, b: float) -> float:
    return abs(a - b) / max(abs(b), 1e-30)


def forwarded_gates(graph, metadata, report) -> dict:
    """{swap-in: how, and the trigger's type} of the swap-ins the report calls ungated although
    their send waits for what Grappler moved the trigger's control edge to when it removed the
    trigger:

    - "bypassed": a trigger the optimizers bypass (a StopGradient, an Identity, a Reshape to the
      same shape) hands its control edges to its inputs: the gate is one of its nearest
      ancestors that stayed, which the trigger would have run right after;
    - "merged": a trigger that computes what another op computes (the same op type and
      attributes over the same inputs, recursively: a batch norm gradient's Neg on ResNet's
      main and shortcut branches, whose upstream gradient is one tensor) is merged into that
      twin by common subexpression elimination: the gate is the twin."""
    optimized = {n.name for f in metadata.function_graphs for n in f.post_optimization_graph.node}
    ops = {op.name: op for op in graph.get_operations()}
    found = {}
    for check in report.swap_ins:
        trigger = ops.get(check.trigger)
        if check.gated or None in (check.gate, check.send, trigger) or trigger.name in optimized:
            continue
        kept, stack, seen = set(), [trigger], set()
        while stack:  # back through the ops Grappler removed, to the nearest ones it kept
            op = stack.pop()
            for source in [t.op for t in op.inputs] + list(op.control_inputs):
                if source.name not in seen:
                    seen.add(source.name)
                    if source.name in optimized:
                        kept.add(source.name)
                    else:
                        stack.append(source)
        gate = check.gate.split("/ctrl/")[0]  # (a node the partitioner made for the edge)
        if gate in kept:
            found[check.name] = f"bypassed {trigger.type}"
        elif gate in ops and _same_computation(ops[gate], trigger):
            found[check.name] = f"merged {trigger.type}"
    return found


def _same_computation(a, b, depth: int = 12) -> bool:
    """Whether ops `a` and `b` compute the same value as common subexpression elimination sees
    it: the same type and attributes over the same inputs, or inputs that are such twins."""
    if a is b:
        return True
    if depth == 0 or a.type != b.type or len(a.inputs) != len(b.inputs):
        return False
    attrs = [{k: v for k, v in op.node_def.attr.items() if not k.startswith("_")} for op in (a, b)]
    if attrs[0] != attrs[1]:
        return False
    return all(
        x.value_index == y.value_index and _same_computation(x.op, y.op, depth - 1)
        for x, y in zip(a.inputs, b.inputs, strict=True)
    )


def reads_with_a_wait(graph, report) -> dict:
    """{piece read: gated} of the piece reads that wait for more than their own data inputs
    (the piece before; a first piece waits for its kept inputs, which is implied when it has
    one: Grappler may drop that wait, as it turns a slice of a whole axis into an Identity)."""
    ops = {op.name: op for op in graph.get_operations()}
    found = {}
    for name, gated in report.piece_reads.items():
        op = ops[name]
        waits = {c.name for c in op.control_inputs}
        waits |= {c.name for t in op.inputs for c in t.op.control_inputs}
        if waits - {t.op.name for t in op.inputs}:
            found[name] = gated
    return found


def ungated_copies(report, metadata, space) -> list:
    """Per swap-in whose Identity ran on the compute device (the "device-swapin" control):
    (name, when its trigger ended, when the host's `_Send` that copies its input to the device
    started), seconds from the step's first event, from a profiled step's host events."""
    from lms.observe.xspace import op_events  # (what host_timing reads)

    events = {}
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            for start, duration, name, _ in op_events(plane):
                if name not in events or start < events[name][0]:
                    events[name] = (start, start + duration)
    origin = min((a for a, _ in events.values()), default=0)
    nodes = {
        n.name: n for f in metadata.function_graphs for p in f.partition_graphs for n in p.node
    }
    sends = {n.attr["tensor_name"].s: n.name for n in nodes.values() if n.op == "_Send"}
    found = []
    for check in report.swap_ins:
        node = nodes.get(check.name)
        source = nodes.get(node.input[0].split(":")[0]) if node is not None else None
        if source is None or source.op != "_Recv":
            continue
        send = events.get(sends.get(source.attr["tensor_name"].s))
        trigger = events.get(check.trigger)
        if send and trigger:
            found.append((check.name, (trigger[1] - origin) / 1e12, (send[0] - origin) / 1e12))
    return found


def step_graphs(metadata):
    """`metadata` with only the function graphs that ran LMS ops: the first call's metadata may
    also hold functions TensorFlow made for eager ops on the compute device, whose node names
    must not shadow the step's."""
    kept = config_pb2.RunMetadata()
    kept.function_graphs.extend(
        f
        for f in metadata.function_graphs
        if any(LMS_SCOPE.match(n.name) for p in f.partition_graphs for n in p.node)
    )
    return kept


def placement(graph, metadata) -> tuple:
    """What TensorFlow ran of the LMS ops of `graph` (lms.observe.placement): the report, and it as
    plain data."""
    everything, metadata = metadata, step_graphs(metadata)
    report = read_placement(graph, metadata)
    forwarded = forwarded_gates(graph, metadata, report)
    reads = reads_with_a_wait(graph, report)
    return report, {
        "function_graphs": len(metadata.function_graphs),
        "all_function_graphs": len(everything.function_graphs),
        "planned": len(report.planned),
        "ran": len(report.ran),
        "missing": len(report.missing),
        "missing_names": report.missing[:5],
        "misplaced": report.misplaced[:5],
        "swap_ins": len(report.swap_ins),
        "gated": len(report.swap_ins) - len(report.ungated),
        "ungated": report.ungated[:5],
        "forwarded": len(forwarded),
        # gated through what stands for a trigger Grappler removed (lms.observe.placement's
        # stand-ins)
        "stood_in": sum(
            1 for c in report.swap_ins if c.gated and c.gate and not c.gate.startswith(c.trigger)
        ),
        "forwarded_how": sorted(set(forwarded.values())),
        "still_ungated": [n for n in report.ungated if n not in forwarded][:5],
        "piece_reads": len(report.piece_reads),
        "piece_reads_gated": sum(report.piece_reads.values()),
        "piece_reads_waiting": len(reads),
        "piece_reads_waiting_gated": sum(reads.values()),
        "grappler_swaps": len(report.grappler_swaps),
        "transposes": len(report.transposes),
        "partitions": report.partitions,
        "placement_ok": report.ok,
        "summary": report.summary(),
    }


def updates(case, step, plain: dict, name: str) -> dict:
    """One step's loss and updates of `step` against the plain step's (`plain` caches those per
    model), both with exact arithmetic (a new instantiation of each: TensorFlow instantiates a
    function per configuration)."""
    rtol, floor = update_tolerance(case)
    with grappler_options(EXACT_ARITHMETIC):
        if name not in plain:  # the step as traced and compiled before LMS rewrote its graph
            plain[name] = step_update(case, on_device(case.step))
        loss, momentums, moved = step_update(case, step)
    want_loss, want_momentums, want_moved = plain[name]
    bad = update_mismatches(momentums, want_momentums, rtol, floor)
    bad_moved = update_mismatches(moved, want_moved, rtol, floor)
    names = [v.name for v in case.model.trainable_variables]
    return {
        "loss": loss,
        "plain_loss": want_loss,
        "loss_relative": relative(loss, want_loss),
        "rtol": rtol,
        "variables": len(momentums),
        "mismatched": [names[i] for i in bad][:5],
        "moved_mismatched": len(bad_moved),
    }


def check(case, item: dict, plain: dict) -> dict:
    """Plan, run and check one item (module docstring)."""
    clock = Clock()
    control = item.get("control")
    checks = item.get("checks", CHECKS)
    planner = lms.LMS(**lms_options(item["plan"], item["model"]))
    if control == "device-swapin":
        target = planner.target
        planner.pipeline.mechanism = DeviceSideSwapIn(target.host_device, target.compute_device)
    step = planner.wrap(case.step)
    x, y = case.images, case.labels
    with contextlib.ExitStack() as stack:
        recorder = stack.enter_context(unkept()) if control == "unkept" else None
        # the first call plans, rewrites and instantiates: its run metadata has the graphs
        metadata = stack.enter_context(run_metadata())
        first = float(step(x, y))
    clock.lap("first_call")
    callable_, _ = step.prepare(x, y)
    graph = callable_.graph
    if recorder is not None:  # what was made, as if it were kept: the ops the checks look for
        graph = types.SimpleNamespace(
            control_outputs=recorder.ops, get_operations=callable_.graph.get_operations
        )
    report, found = placement(graph, metadata[0])
    clock.lap("placement")
    planned = planner.report
    found.update(
        model=item["model"],
        plan=item["plan"],
        control=control,
        first_loss=first,
        splits=len(planned.splits or ()),
        chained=sum(1 for s in planned.splits or () if s.get("chained_after")),
        split_types=sorted({s["op_type"] for s in planned.splits or ()}),
        swapped_tensors=planned.swapped_tensors,
    )
    if "copies" in checks:  # the device-swapin control: when its ungated copies ran
        copies = ungated_copies(report, step_graphs(metadata[0]), profiled_space(step, x, y))
        found.update(
            copies=len(copies),
            copies_before_trigger=sum(start < end for _, end, start in copies),
            copies_sample=copies[:3],
        )
    if "timing" in checks:
        timings = host_timing(report, profiled_space(step, x, y))
        found.update(
            timed=len(timings),
            after_trigger=sum(t.after_trigger for t in timings),
            not_after=[
                (t.name, t.trigger, t.trigger_end, t.start) for t in timings if not t.after_trigger
            ][:5],
        )
        clock.lap("timing")
    if "replay" in checks:  # with the configuration a user's step is called with
        result = replay(callable_.graph, REPLAY_MEMORY, "lms")
        found["replay"] = {**result.as_dict(), "removed": list(result.removed[:5])}
        clock.lap("replay")
    if "equivalence" in checks:
        found["equivalence"] = updates(case, step, plain, item["model"])
        clock.lap("equivalence")
    found["seconds"] = {"total": sum(clock.laps.values()), **clock.laps}
    found["seconds"]["planning"] = planned.timings_s
    return found


class Clock:
    """Seconds per phase of an item (the test's time is CI's)."""

    def __init__(self):
        self.laps, self._last = {}, time.perf_counter()

    def lap(self, name: str) -> None:
        now = time.perf_counter()
        self.laps[name], self._last = now - self._last, now


def main(items: list) -> None:
    tf.keras.utils.set_random_seed(0)
    cases, plain, results = {}, {}, []
    for item in items:
        started = time.perf_counter()
        if item["model"] not in cases:
            cases[item["model"]] = build(item["model"])
        case = cases[item["model"]]
        built = time.perf_counter() - started
        result = check(case, item, plain)
        result["build_seconds"] = built
        results.append(result)
        print(json.dumps(result), file=sys.stderr, flush=True)
    print(
        json.dumps(
            {
                "onednn": lms.internal.onednn_enabled(),
                "tensorflow": tf.__version__,
                "results": results,
            }
        )
    )


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
