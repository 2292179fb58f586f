"""Whether TensorFlow runs a rewritten step's copies as planned: read from what it ran, not from
what LMS built.

A step with TensorFlow's own copies (a GPU, or the two-device mode of lms/device/target.py) is
optimized by Grappler and then cut by the partitioner into one graph per device, with a
`_Send`/`_Recv` pair on every edge that crosses devices: the pair *is* the copy. So the questions a
GPU path must answer are answered by a call's run metadata (`RunMetadata.function_graphs`):

- **survived**: every op LMS made and kept (the step's control outputs in the `lms` scope) is in
  the partition graphs, on the device it was placed on;
- **gated**: each swap-in's host-side Identity waits (a control input, through the partition's
  `_Recv` of the control edge) for its trigger, and its output leaves the host through a
  `_Send`: the host-to-device copy cannot start before the trigger ran;
- **timed** (`check_step(..., timed=True)`): in a profiled step, each such copy starts after its
  trigger's op ended: on the CPU (two-device) the host-side `_Send` against the trigger's op
  event (`host_timing`); on a GPU the host-to-device copy event, annotated with the send's or
  recv's name, against the trigger's kernels (`copy_timing`, GPU only).

Nothing here changes a step; the suite's `inv gpucheck` and the tests read these reports.
"""

import re
from dataclasses import asdict, dataclass, replace

from lms.graph.names import SPLIT_SCOPE, SWAP_IN
from lms.graph.names import SWAP_SCOPE as SCOPE
from lms.observe.copy_match import copy_names, swap_copy_pairs
from lms.observe.xspace import op_events, profiled_space

# the scopes of the ops LMS makes (swaps; split ops' pieces), uniquified by the importer ("lms_1/")
LMS_SCOPE = re.compile(rf"^({SCOPE}|{SPLIT_SCOPE})(_\d+)?/")
_EDGE = re.compile(r"^edge_\d+_(.*)$")


@dataclass(frozen=True)
class SwapInCheck:
    """One swap-in as it ran: its host node, the trigger planned, the source of the control
    edge it waited for in its partition (`gate`), and the `_Send` its output left the host by."""

    name: str
    device: str | None
    trigger: str
    gate: str | None
    send: str | None
    gate_inputs: tuple = ()  # the gate's nearest ancestors in its partition (for timing)
    # where Grappler removed the trigger (bypassed it, or merged it into a twin), the ops that
    # stand for it: its nearest inputs, and a twin of its type and inputs that ran
    stand_ins: tuple = ()

    @property
    def gated(self) -> bool:
        if self.gate is None or self.send is None:
            return False
        return any(_same_op(self.gate, op) for op in (self.trigger, *self.stand_ins))


@dataclass(frozen=True)
class PlacementReport:
    """What a call of a rewritten step ran of its LMS ops (module docstring)."""

    planned: dict  # kept LMS op name -> the device it was placed on ("" where TensorFlow chose)
    ran: dict  # of those, name -> the device it ran on, from the partition graphs
    swap_ins: tuple  # SwapInCheck, one per swap-in
    piece_reads: dict  # a split op's host slice -> whether it still waits for the piece before
    grappler_swaps: tuple = ()  # nodes Grappler's own swapping pass added (_CopyFrom*)
    transposes: tuple = ()  # transposes Grappler's layout optimizer added
    partitions: int = 0
    timings: tuple = ()  # SwapInTiming per swap-in, when the step was profiled (`check_step`)
    clock: str | None = None  # "host" (the sends' events) or "device" (GPU copy events)

    @property
    def missing(self) -> list:
        return sorted(set(self.planned) - set(self.ran))

    @property
    def misplaced(self) -> list:
        return sorted(
            name
            for name, device in self.planned.items()
            if device and name in self.ran and not _same_device(device, self.ran[name])
        )

    @property
    def ungated(self) -> list:
        return [s.name for s in self.swap_ins if not s.gated]

    @property
    def early(self) -> list:
        """Swap-ins whose copy was not seen to start after its trigger ended (profiled only)."""
        return [t.name for t in self.timings if not t.after_trigger]

    @property
    def ok(self) -> bool:
        return not (
            self.missing
            or self.misplaced
            or self.ungated
            or self.early
            or self.grappler_swaps
            or self.transposes
            or not all(self.piece_reads.values())
        )

    def as_dict(self) -> dict:
        data = asdict(self)
        data["swap_ins"] = [{**asdict(s), "gated": s.gated} for s in self.swap_ins]
        data["timings"] = [{**asdict(t), "after_trigger": t.after_trigger} for t in self.timings]
        data.update(
            ok=self.ok,
            missing=self.missing,
            misplaced=self.misplaced,
            ungated=self.ungated,
            early=self.early,
        )
        return data

    def summary(self) -> str:
        timed = ""
        if self.clock is not None:
            copies = "host-side sends" if self.clock == "host" else "copy events"
            after = len(self.timings) - len(self.early)
            timed = f", {after} of {len(self.timings)} {copies} after their trigger ended"
        return (
            f"{len(self.ran)} of {len(self.planned)} LMS ops ran as placed, "
            f"{len(self.swap_ins) - len(self.ungated)} of {len(self.swap_ins)} swap-ins gated by "
            f"their trigger{timed}, {sum(self.piece_reads.values())} of {len(self.piece_reads)} "
            f"piece reads gated, {len(self.grappler_swaps)} Grappler swaps, "
            f"{len(self.transposes)} layout transposes"
        )


def kept_lms_ops(graph) -> list:
    """The ops LMS made a step's control outputs (lms/device/rewriter.py `keep_from_grappler`)."""
    return [op for op in graph.control_outputs if LMS_SCOPE.match(op.name)]


def planned_swap_ins(graph) -> dict:
    """{host swap-in name: trigger name} of a rewritten graph (the swap-in's control input)."""
    found = {}
    for op in kept_lms_ops(graph):
        if op.name.rsplit("/", 1)[-1] == SWAP_IN and op.control_inputs:
            found[op.name] = op.control_inputs[0].name
    return found


def check_step(function, *args, timed: bool = False) -> PlacementReport:
    """Run one more step of `function` (an `LMSFunction` already called once) and report from
    its run metadata which LMS ops ran where and whether its swap-ins were gated. With `timed`,
    one more step under the profiler says whether each swap-in's copy started after its trigger
    ended (`host_timing` on the CPU, `copy_timing` on a GPU). Each step trains."""
    callable_, _ = function.prepare(*args)
    metadata = function.run_metadata(*args)
    report = read_placement(callable_.graph, metadata)
    if not timed:
        return report
    space = profiled_space(function, *args)
    if function.pipeline.device.target.kind == "gpu":
        return replace(
            report, timings=tuple(copy_timing(report, copy_names(metadata), space)), clock="device"
        )
    return replace(report, timings=tuple(host_timing(report, space)), clock="host")


def read_placement(graph, metadata) -> PlacementReport:
    """The `PlacementReport` of the rewritten `graph` from a call's `metadata`."""
    kept = kept_lms_ops(graph)
    planned = {op.name: op.device for op in kept}
    triggers = planned_swap_ins(graph)
    reads = [op.name for op in kept if op.type == "StridedSlice" and _waits(op)]
    nodes, post = {}, []
    partitions = 0
    for function_graph in metadata.function_graphs:
        optimized = function_graph.post_optimization_graph.node
        if planned and not any(n.name in planned for n in optimized):
            continue  # another function's (TensorFlow records every one instantiated)
        post.extend(optimized)
        for partition in function_graph.partition_graphs:
            partitions += 1
            by_name = {n.name: n for n in partition.node}
            for n in partition.node:
                nodes[n.name] = (n, by_name)
    ran = {name: nodes[name][0].device for name in planned if name in nodes}
    optimized_names = {n.name for n in post}
    pairs = swap_copy_pairs(metadata)  # each swap-in's send, found in one pass
    swap_ins = []
    for name, trigger in sorted(triggers.items()):
        if name not in nodes:
            swap_ins.append(SwapInCheck(name, None, trigger, None, None))
            continue
        node, partition = nodes[name]
        gate = _control_source(node, partition)
        ancestors = _ancestors(nodes[gate][1], gate) if gate in nodes else ()
        stand_ins = () if trigger in optimized_names else _stand_ins(graph, trigger, post)
        swap_ins.append(
            SwapInCheck(
                name, node.device, trigger, gate, _send_of(name, pairs), ancestors, stand_ins
            )
        )
    piece_reads = {}
    for name in reads:
        node, partition = nodes.get(name, (None, {}))
        links = [node] + [partition.get(i.split(":")[0]) for i in node.input] if node else []
        piece_reads[name] = any(n is not None and any(i[0] == "^" for i in n.input) for n in links)
    grappler_swaps = tuple(n.name for n in post if n.op.startswith("_CopyFrom"))
    transposes = tuple(n.name for n in post if n.op == "Transpose" and "LayoutOptimizer" in n.name)
    return PlacementReport(
        planned, ran, tuple(swap_ins), piece_reads, grappler_swaps, transposes, partitions
    )


def _waits(op) -> bool:
    """Whether a piece's host slice waits for something besides what it reads (the previous
    piece's store): its own control inputs or, as TensorFlow places them, those of the constants
    it was made with. A first piece waits only for its input, which its data edge guarantees."""
    read = {t.op for t in op.inputs}
    controls = set(op.control_inputs) | {c for t in op.inputs for c in t.op.control_inputs}
    return bool(controls - read)


def _stand_ins(graph, trigger: str, post) -> tuple:
    """What stands for a trigger Grappler removed: the ops it read or waited for (up to three
    links back, through ops removed too: a bypassed StopGradient, a Reshape to the same shape),
    and an op that ran with its type and inputs (a duplicate Grappler merged it into)."""
    try:
        op = graph.get_operation_by_name(trigger)
    except (KeyError, ValueError):
        return ()
    found, frontier = [], [op]
    for _ in range(3):
        frontier = [t.op for o in frontier for t in o.inputs] + [
            c for o in frontier for c in o.control_inputs
        ]
        found += [o.name for o in frontier if o.name not in found]
    inputs = sorted(t.name.removesuffix(":0") for t in op.inputs)
    twins = [
        n.name
        for n in post
        if n.op == op.type and sorted(i for i in n.input if not i.startswith("^")) == inputs
    ]
    return tuple(found + twins)


def _control_source(node, partition) -> str | None:
    """The op whose control edge `node` waits for: through its control inputs, back along the
    partition's Identity/NoOp links to a `_Recv` of a cross-device edge (its tensor_name is
    "edge_<id>_<source>"), or an op of the same partition."""
    stack = [i[1:] for i in node.input if i.startswith("^")]
    seen = set()
    while stack:
        name = stack.pop().split(":")[0]
        if name in seen or name not in partition:
            continue
        seen.add(name)
        found = partition[name]
        if found.op == "_Recv":
            match = _EDGE.match(found.attr["tensor_name"].s.decode())
            return match.group(1) if match else None
        if found.op in ("Identity", "NoOp", "Const"):
            stack.extend(i.lstrip("^") for i in found.input)
            continue
        return found.name
    return None


def _ancestors(partition, name: str, depth: int = 3) -> tuple:
    """The ops `name` reads or waits for in its partition, up to `depth` links back: an op that
    runs inline (a Squeeze, a Reshape) leaves no event in a profile, its inputs do."""
    found, frontier = [], [name]
    for _ in range(depth):
        frontier = [
            i.lstrip("^").split(":")[0]
            for n in frontier
            if n in partition
            for i in partition[n].input
        ]
        found += [n for n in frontier if n not in found]
    return tuple(found)


def _send_of(name: str, pairs: dict) -> str | None:
    """The `_Send` that takes swap-in `name`'s output off the host (lms.observe.copy_match), if
    any."""
    pair = pairs.get(name)
    return pair.send if pair is not None and pair.direction == "in" else None


def _same_op(found: str, planned: str) -> bool:
    """Whether the control edge's source is the trigger (or a node the partitioner made for
    its control edge, "<trigger>/ctrl/_5")."""
    return found == planned or found.startswith(f"{planned}/")


def _same_device(placed: str, ran: str) -> bool:
    """ "/device:CPU:0" placed vs "/job:localhost/replica:0/task:0/device:CPU:0" ran."""
    return placed.lower().rsplit("device:", 1)[-1] == ran.lower().rsplit("device:", 1)[-1]


@dataclass(frozen=True)
class SwapInTiming:
    """When a swap-in's copy started against when its trigger ended (seconds from the step's
    first event): `start >= trigger_end` is the plan kept."""

    name: str
    trigger: str
    trigger_end: float | None
    start: float | None

    @property
    def after_trigger(self) -> bool:
        return None not in (self.start, self.trigger_end) and self.start >= self.trigger_end


def host_timing(report: PlacementReport, space) -> list:
    """From a profiled step's XSpace on the CPU (the two-device mode), per gated swap-in: when
    its `_Send` started (the copy's start: the receiver's `_Recv` completes with it) and when
    the op its control edge came from ended. The executor's events name both."""
    events = {}
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            for start, duration, name, _ in op_events(plane):
                first = events.get(name)
                if first is None or start < first[0]:
                    events[name] = (start, start + duration)
    origin = min((a for a, _ in events.values()), default=0)
    found = []
    for check in report.swap_ins:
        source = events.get(check.gate) if check.gate else None
        if source is None:  # the gate ran inline: it ended after the last of its inputs
            ends = [events[n][1] for n in check.gate_inputs if n in events]
            source = (None, max(ends)) if ends else None
        send = events.get(check.send) if check.send else None
        found.append(
            SwapInTiming(
                check.name,
                check.gate or check.trigger,
                None if source is None else (source[1] - origin) / 1e12,
                None if send is None else (send[0] - origin) / 1e12,
            )
        )
    return found


def copy_timing(report: PlacementReport, names: dict, space) -> list:
    """GPU only: per swap-in of `report`, when its host-to-device copy started on the device (the
    profile's MemcpyH2D events whose `tf_op` is one end of the swap-in's send/recv pair: `names`
    is lms.observe.copy_match.copy_names of the run's metadata) and when its trigger's kernels
    ended (for a trigger that runs no kernel, the last of its inputs'). Tested on a device plane
    written as
    the profiler's CUPTI collector writes one (tests/suite/running/test_gpucheck.py)."""
    from lms.observe.copy_events import copy_events, tf_op_name

    kernels, first = {}, []  # op -> end of its last kernel, on the profiler's clock (ps)
    for plane in space.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
        for line in plane.lines:
            for event in line.events:
                op = tf_op_name(event, stat_names)
                start = line.timestamp_ns * 1000 + event.offset_ps
                first.append(start)
                if op and not plane.event_metadata[event.metadata_id].name.startswith("Memcpy"):
                    kernels[op] = max(kernels.get(op, 0), start + event.duration_ps)
    copies = [c for c in copy_events(space) if c.direction == "in"]
    origin = min(first, default=0)  # the step's first event on the device: times from it
    found = []
    for check in report.swap_ins:
        starts = [c.start_ps for c in copies if names.get(c.op) == (check.name, "in")]
        trigger = check.gate or check.trigger
        end = kernels.get(trigger)
        if end is None:
            ends = [kernels[n] for n in check.gate_inputs if n in kernels]
            end = max(ends) if ends else None
        found.append(
            SwapInTiming(
                check.name,
                trigger,
                None if end is None else (end - origin) / 1e12,
                (min(starts) - origin) / 1e12 if starts else None,
            )
        )
    return found
