"""Per-op times of one step from TensorFlow's profiler: what the step-time model
(lms/timing/steptime.py)
replays with a different link.

`profile_step` runs a callable under `tf.profiler.experimental` and reads the XSpace it writes:
on the host, the executor's op events ("name:Type", one per op run, on its compute threads); on
a GPU, the device plane's kernel and copy events as well. The XSpace proto ships with
TensorFlow (`tsl.profiler.protobuf.xplane_pb2`; lms/_tf_private.py finds it).
"""

import math
from dataclasses import dataclass

from lms.graph.loops import WHILE_OPS, body_graph, trip_count
from lms.graph.names import SWAP_IN, swap_kind, transfer_kind
from lms.observe.xspace import op_events, profiled_space
from lms.split.rewrite import running_ops
from lms.timing.steptime import SwapGraph


@dataclass(frozen=True)
class OpEvent:
    """One op run: its graph name, type, and start and duration in seconds from the first op."""

    name: str
    type: str
    start: float
    duration: float

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class StepProfile:
    ops: tuple  # OpEvent, by start
    copies: tuple  # OpEvent of a GPU's host<->device copies (empty on the host)

    @property
    def makespan(self) -> float:
        return max((e.end for e in self.ops), default=0.0)


def _device_events(plane, names: dict):
    """GPU only: kernels and copies of a device plane, as one event per TensorFlow op (first
    start to last end of the op's kernels, from each event's `tf_op` stat), and the copies
    alone ("MemcpyH2D" / "MemcpyD2H"). A copy or kernel whose op is in `names` (a swap's
    `_Send`/`_Recv`, lms/observe/copy_match.py) is named by the swap's transfer instead."""
    from lms.observe.copy_events import stat_value

    metadata = plane.event_metadata
    stat_names = {k: m.name for k, m in plane.stat_metadata.items()}
    spans, copies = {}, []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            kind = metadata[event.metadata_id].display_name or metadata[event.metadata_id].name
            start, end = base + event.offset_ps, base + event.offset_ps + event.duration_ps
            tf_op = stat_value(event, stat_names, "tf_op")
            name, _, op_type = tf_op.rpartition(":") if tf_op else ("", "", "")
            if name in names:
                name = names[name][0]
            if "memcpy" in kind.lower():
                copies.append((start, event.duration_ps, name or kind, kind))
            if name:
                first, last, _ = spans.get(name, (start, end, op_type))
                spans[name] = (min(first, start), max(last, end), op_type)
    ops = [(a, b - a, name, kind) for name, (a, b, kind) in spans.items()]
    return ops, copies


def _renamed(raw, names: dict):
    """Host events (start, duration, name, kind) with a swap's `_Send` named by its transfer
    (the events of one transfer merged: the step-time model replays each transfer once). The
    send runs when the bytes are there to move; its `_Recv` was posted when the step began (it
    has no inputs), so the recv's event says nothing of when the transfer was asked for."""
    from lms.observe.copy_match import SENDS

    merged, others = {}, []
    for start, duration, name, kind in raw:
        transfer = names.get(name) if kind in SENDS else None
        if transfer is None:
            others.append((start, duration, name, kind))
            continue
        first, last, _ = merged.get(transfer[0], (start, start + duration, kind))
        merged[transfer[0]] = (min(first, start), max(last, start + duration), kind)
    return others + [(a, b - a, name, kind) for name, (a, b, kind) in merged.items()]


def profile_step(callable_, *args, names: dict | None = None) -> StepProfile:
    """Run `callable_(*args)` once under the profiler; its op events and copies (`step_profile`).
    Call it after a warm-up step: the first call of a tf.function traces and optimizes."""
    return step_profile(profiled_space(callable_, *args), names)


def step_profile(space, names: dict | None = None) -> StepProfile:
    """A profiled step's op events and copies. On the host the ops are the executor's events on
    its compute threads; on a GPU they are the device's kernels and copies per op (the host only
    enqueues them).

    `names` ({send/recv node name: (transfer, direction)}, lms/observe/copy_match.py `copy_names`):
    with device copies a swap's bytes move through the partitioner's send/recv pair, not through
    the swap op, which runs no kernel (a GPU) or runs inline without an event (two logical CPU
    devices); the pair's events are then named by the swap's transfer, once per transfer, so
    that the step-time model sees the real transfers."""
    names = names or {}
    host, device, copies = [], [], []
    for plane in space.planes:
        if plane.name.startswith("/host:"):
            host += op_events(plane)
        elif plane.name.startswith("/device:GPU"):  # GPU only
            ops, plane_copies = _device_events(plane, names)
            device += ops
            copies += plane_copies
    host = device or _renamed(host, names)
    if not host:
        raise RuntimeError("the profile holds no op events (was the step a tf.function?)")
    origin = min(e[0] for e in host + copies)

    def events(raw):
        return tuple(
            OpEvent(name, kind, (start - origin) / 1e12, duration / 1e12)
            for start, duration, name, kind in sorted(raw)
        )

    return StepProfile(events(host), events(copies))


def _looped_copies(graph, op, size) -> dict:
    """The bytes a While of a split op's pieces moves each way, its trips' piece copies."""
    body, trips = body_graph(graph, op, "body"), trip_count(op)
    moved = {}
    for inner in body.get_operations() if body is not None and trips else ():
        if inner.type != "Placeholder" and (piece := transfer_kind(inner.name)):
            tensors = inner.outputs if piece == "in" else inner.inputs
            moved[piece] = moved.get(piece, 0) + trips * max(map(size, tensors), default=0)
    return moved


def swap_graph(graph, batch_size: int | None = None) -> SwapGraph:
    """The swaps of a rewritten step's graph for the step-time model: each swap op's direction,
    bytes and source, and which ops read (data or control) a swap op. `batch_size` substitutes
    an unknown leading dimension, as in the analysis.

    A swap-in's own follow-up ops (`.../lms_swapin_copy`, `.../lms_swapin_shape`: the device
    Identity of `DeviceCopy`, the host store's DeepCopy and EnsureShape) pass the transfer on:
    they and the ops that read them wait for it. With device copies the swap-in's readers read
    `lms_swapin_copy`, an Identity that leaves no event in a profile (no kernel on a GPU, run
    inline on the CPU): its readers are the ops the transfer holds back.

    A split op's piece copies (`lms_piece_in`, `lms_piece_out`: each slice or whole brought to
    the device, each kept input or piece taken to the host) are transfers too, with the bytes
    they move: a split plan's projection counts what its pieces (and chains) really move."""
    transfers, gates, via = {}, {}, {}
    ops = graph.get_operations()

    def size(tensor) -> int:
        if tensor.shape.rank is None:
            return 0
        dims = [(batch_size or 1) if d is None else d for d in tensor.shape.as_list()]
        return math.prod(dims) * tensor.dtype.size

    running = None  # the ops that run: a pruned piece copy (an assemble no reader runs) moves none
    for op in ops:
        kind = swap_kind(op.name)
        if kind == "out":
            transfers[op.name] = ("out", size(op.inputs[0]), None)
        elif kind is None and (piece := transfer_kind(op.name)):  # a piece's, a kept input's
            running = running_ops(graph) if running is None else running
            if op in running:
                moved = op.outputs if piece == "in" else op.inputs  # (the largest: not a handle)
                transfers[op.name] = (piece, max(map(size, moved), default=0), None)
        elif op.type in WHILE_OPS and (looped := _looped_copies(graph, op, size)):
            # a loop of alike pieces (lms/split/looped.py): its copies, every iteration's
            running = running_ops(graph) if running is None else running
            if op in running:
                for piece, moved in looped.items():
                    transfers[f"{op.name}/{piece}"] = (piece, moved, None)
    for op in ops:
        if swap_kind(op.name) == "in":
            source = op.inputs[0].op.name
            transfers[op.name] = ("in", transfers[source][1], source)
    for op in ops:
        scope, _, last = op.name.rpartition("/")
        if last.startswith(f"{SWAP_IN}_") and f"{scope}/{SWAP_IN}" in transfers:
            via[op.name] = f"{scope}/{SWAP_IN}"
    for op in ops:
        if op.name in transfers:
            continue
        read = {t.op.name for t in op.inputs} | {c.name for c in op.control_inputs}
        hits = sorted({via.get(name, name) for name in read} & transfers.keys())
        if hits:
            gates[op.name] = tuple(hits)
    return SwapGraph(transfers, gates)


def profile_copies(callable_, *args) -> dict:
    """Run `callable_(*args)` once under the profiler; its copies'
    `lms.observe.copy_events.copy_totals`
    ({} without a GPU)."""
    from lms.observe.copy_events import copy_totals

    return copy_totals(profiled_space(callable_, *args))
