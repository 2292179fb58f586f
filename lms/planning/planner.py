"""Plan swaps from an analysis and a parameter set (docs/lms.md).

A tensor is swapped out when a consumer sits more than `swapout_threshold` levels after its
producer. Its far consumers are grouped (`swapin_groupby`); each group reads one swap-in. The
swap-in's trigger is found by walking back from the group's first consumer along its
latest-level inputs, `swapin_ahead` steps: those are the ops that really run just before the
consumer late in the backward pass (any other input fires too early and moves no peak).
"""

import bisect
import logging
from dataclasses import dataclass, field

import numpy as np

from lms.graph.step import ALIAS_OPS, Analysis, CacheKey, Fact, GiB
from lms.planning.ordering import anchor_ops, depth_first_order, next_anchors, order_positions
from lms.planning.ordering import neighbours as _neighbours
from lms.values.parameters import Parameters

log = logging.getLogger("lms")


@dataclass
class SwapIn:
    consumers: list  # [(op index, input position)] reading the swapped-in copy
    trigger: int  # op index after which the copy comes back


@dataclass
class Swap:
    tensor: int  # tensor index
    swap_ins: list = field(default_factory=list)
    near_consumers: list = field(default_factory=list)  # op indices still reading the original


@dataclass
class Plan:
    parameters: Parameters
    swaps: list
    serialized_levels: frozenset
    order: np.ndarray | None = None  # ordering=1: every op's place in the enforced order

    @property
    def swap_count(self) -> int:
        return len(self.swaps)

    @property
    def swap_in_count(self) -> int:
        return sum(len(s.swap_ins) for s in self.swaps)

    def swapped_bytes(self, analysis: Analysis) -> int:
        return sum(analysis.buffer_bytes(s.tensor) for s in self.swaps)

    def swapped_in_bytes(self, analysis: Analysis) -> int:
        return sum(analysis.buffer_bytes(s.tensor) * len(s.swap_ins) for s in self.swaps)


def _latest_input_op(analysis: Analysis, op: int, exclude_tensor: int) -> int | None:
    """The producer of `op`'s latest-level input (control inputs too), ignoring one tensor."""
    node = analysis.ops[op]
    candidates = [analysis.tensors[t].producer for t in node.inputs if t != exclude_tensor]
    candidates += node.control_inputs
    if not candidates:
        return None
    return max(candidates, key=lambda i: analysis.ops[i].level)


def _ancestors(analysis: Analysis) -> tuple[np.ndarray, np.ndarray]:
    """Jump table over the "latest input" chains: row j holds each op's 2^j-th predecessor along
    its latest-level inputs (a sentinel past the last op where the chain ends), and the levels
    (the sentinel's is -1). Built once per analysis: walking back `swapin_ahead` ops then costs
    log2(ahead) steps instead of `ahead` (DeepLabV3+ at 1600²: 15 s of planning per tuning)."""
    if CacheKey(Fact.ANCESTORS) not in analysis.cache:
        count = len(analysis.ops)
        level = np.array([op.level for op in analysis.ops] + [-1], dtype=np.int64)
        parent = np.full(count + 1, count, dtype=np.int64)
        for index in range(count):
            previous = _latest_input_op(analysis, index, -1)
            if previous is not None:
                parent[index] = previous
        table = [parent]
        for _ in range(max(1, count.bit_length())):
            table.append(table[-1][table[-1]])
        analysis.cache[CacheKey(Fact.ANCESTORS)] = (np.stack(table), level)
    return analysis.cache[CacheKey(Fact.ANCESTORS)]


def find_trigger(analysis: Analysis, consumer: int, tensor: int, ahead: int) -> int | None:
    """Walk back `ahead` steps from `consumer` along latest-level inputs (the first step ignores
    the swapped tensor itself); never to or before the tensor's producer."""
    producer_level = analysis.ops[analysis.tensors[tensor].producer].level
    node = _latest_input_op(analysis, consumer, tensor)
    if node is None or analysis.ops[node].level <= producer_level or ahead < 1:
        return None
    table, level = _ancestors(analysis)
    remaining = ahead - 1
    # levels fall strictly along a chain, so "still after the producer" holds on a prefix of it
    for power in range(len(table) - 1, -1, -1):
        if remaining >= 1 << power:
            candidate = table[power][node]
            if level[candidate] > producer_level:
                node, remaining = int(candidate), remaining - (1 << power)
    return node


def serialized_levels(analysis: Analysis, parameters: Parameters) -> frozenset:
    levels = set()
    count = len(analysis.levels)
    for start, stop in parameters.serialization:
        levels.update(range(start, min(count, stop if stop is not None else count)))
    if parameters.serialization_by_size:
        limit = parameters.serialization_by_size * GiB
        for level, ops in enumerate(analysis.levels):
            size = sum(analysis.tensors[t].bytes for i in ops for t in analysis.ops[i].outputs)
            if size > limit and len(ops) > 1:
                levels.add(level)
    return frozenset(levels)


def _spans(analysis: Analysis, before: int, after: int) -> bool:
    """Whether a graph pass could fuse an op at or before `before` in the enforced order with
    one at or after `after` (see `_neighbours`): a swap between the two would then sit inside
    one op (TensorFlow refuses the graph, "nodes in a cycle")."""
    where = order_positions(analysis)
    return any(where[n] >= where[after] for n in _neighbours(analysis, [before])) or any(
        where[n] <= where[before] for n in _neighbours(analysis, [after])
    )


def _ordered_trigger(analysis, where, runs_before, group, tensor, ahead) -> int | None:
    """In an enforced order: the op `ahead` places before the group's first reader, after the
    tensor's producer, one that runs in its place (see `anchor_ops`), and before every op a
    later graph pass could fuse a reader with: the swap-in would otherwise sit between two
    halves of one op (oneDNN fuses a filter gradient with the BiasAddGrad beside it; GoogLeNet
    224² b4 with a swap-in triggered between the two: "1603 nodes in a cycle")."""
    producer = where[analysis.tensors[tensor].producer]
    # a group's first position with its neighbours, once per analysis: the tuner's plans ask
    # for the same groups again (ResNet50 1856² b1's model: 93,269 asks in 164 plans)
    firsts = analysis.cache.setdefault(CacheKey(Fact.GROUP_FIRSTS), {})
    key = tuple(group)
    first = firsts.get(key)
    if first is None:
        first = firsts[key] = min(where[c] for c in set(group) | _neighbours(analysis, group))
    trigger = runs_before[max(first - ahead, producer + 1)]
    if trigger < 0 or not producer < where[trigger] < first:
        return None
    return trigger


def swap_out_waiter(analysis: Analysis, plan: Plan, swap: Swap) -> int:
    """In an enforced order: the op that waits for `swap`'s swap-out, so that the device buffer
    is released before it runs (lms/device/rewriter.py): the first anchor after the tensor's
    producer,
    unless a graph pass could fuse ops across the two (`_spans`). -1: none."""
    if plan.order is None:
        return -1
    producer = analysis.tensors[swap.tensor].producer
    waiter = int(next_anchors(analysis)[producer])
    return -1 if waiter < 0 or _spans(analysis, producer, waiter) else waiter


def coordinates(analysis: Analysis, ordered: bool) -> np.ndarray:
    """Where each op sits for the distances of a plan: its position in the enforced order, or
    its level."""
    if ordered:
        return order_positions(analysis)
    if CacheKey(Fact.LEVELS) not in analysis.cache:
        levels = np.fromiter((op.level for op in analysis.ops), np.int64, len(analysis.ops))
        analysis.cache[CacheKey(Fact.LEVELS)] = levels
    return analysis.cache[CacheKey(Fact.LEVELS)]


def plan(analysis: Analysis, parameters: Parameters) -> Plan:
    """The swaps `parameters` (fully resolved: no -1 left) give on `analysis`."""
    if parameters.needs_tuning:
        raise ValueError("plan() needs resolved parameters; tune them first")
    threshold, groupby = parameters.swapout_threshold, parameters.swapin_groupby
    ahead = 1 if parameters.sync_mode & 2 else parameters.swapin_ahead
    order = depth_first_order(analysis) if parameters.ordered else None
    ordered = order is not None
    name = "positions" if ordered else "levels"
    where = analysis.as_list(name, lambda: coordinates(analysis, ordered))
    if ordered:  # distances count ops of the order
        runs_before = analysis.as_list("runs before", lambda: _runs_before(analysis, order))

        def trigger_of(group, tensor):
            return _ordered_trigger(analysis, where, runs_before, group, tensor, ahead)

    else:  # distances count levels

        def trigger_of(group, tensor):
            return find_trigger(analysis, group[0], tensor, ahead)

    swaps = []
    for t, level, readers, positions, reader_ops in _swappable_readers(analysis, where, order):
        cut = bisect.bisect_right(positions, level + threshold)
        far = readers[cut:]
        if not far:
            continue
        swap = Swap(t, near_consumers=sorted(reader_ops - {c for c, _ in far}))
        group, group_level = [], None
        for consumer, consumer_level in zip(far, positions[cut:], strict=True):
            if group and consumer_level - group_level > groupby:
                _close_group(swap, group, trigger_of([c for c, _ in group], t))
                group = []
            if not group:
                group_level = consumer_level
            group.append(consumer)
        _close_group(swap, group, trigger_of([c for c, _ in group], t))
        if swap.swap_ins:
            swaps.append(swap)
    levels = frozenset() if order is not None else serialized_levels(analysis, parameters)
    return Plan(parameters, _useful(analysis, where, swaps), levels, order)


def _runs_before(analysis: Analysis, order: np.ndarray) -> np.ndarray:
    """Per position of the enforced order, the latest op at or before it that can trigger a
    swap-in (an anchor, `anchor_ops`), -1 where none can."""
    runs = anchor_ops(analysis)[order]
    latest = np.maximum.accumulate(np.where(runs, np.arange(len(order)), -1))
    return np.where(latest >= 0, order[np.maximum(latest, 0)], -1)


def _swappable_readers(analysis: Analysis, where: np.ndarray, order) -> list:
    """Per swappable tensor with readers: its index, its producer's coordinate (`coordinates`),
    the readers that may read a swap-in sorted by theirs, those coordinates, and all its reader
    ops. Whatever the parameters: worked out once per analysis and kind of coordinates, as the
    tuner plans a hundred parameter sets on one analysis (DenseNet121 at 0.6x: 109).

    An alias never reads a swap-in: the copy would have to live as long as the alias's readers;
    the alias's own readers are swapped as its tensor's (a view's)."""
    key = CacheKey(Fact.FAR_READERS_ORDERED if order is not None else Fact.FAR_READERS)
    if key not in analysis.cache:
        ops, found = analysis.ops, []
        for t, info in enumerate(analysis.tensors):
            if not info.swappable or not info.consumers:
                continue
            readers = [c for c in info.consumers if ops[c[0]].type not in ALIAS_OPS]
            readers.sort(key=lambda c: where[c[0]])
            positions = [int(where[c[0]]) for c in readers]
            reader_ops = {c for c, _ in info.consumers}
            found.append((t, int(where[info.producer]), readers, positions, reader_ops))
        analysis.cache[key] = found
    return analysis.cache[key]


def buffer_members(analysis: Analysis) -> dict:
    """Per buffer (its root tensor), the tensors living in it: itself and its aliases."""
    if CacheKey(Fact.BUFFER_MEMBERS) not in analysis.cache:
        members = {}
        for t, info in enumerate(analysis.tensors):
            members.setdefault(info.buffer, []).append(t)
        analysis.cache[CacheKey(Fact.BUFFER_MEMBERS)] = members
    return analysis.cache[CacheKey(Fact.BUFFER_MEMBERS)]


def _useful(analysis: Analysis, where: np.ndarray, swaps: list) -> list:
    """The swaps less swap-ins that would come back while their buffer is still on the device:
    a reader left on the original (a near reader of the tensor, of another view of its buffer)
    runs after the swap-in's trigger, or the buffer is a step output. Such a copy only adds its
    bytes beside the original (a gradient's 128 MiB Reshape view swapped while the buffer under
    it stayed for its own readers: the copy doubled the peak). Their readers read the original."""
    by_root = {}
    for swap in swaps:
        by_root.setdefault(analysis.tensors[swap.tensor].buffer, []).append(swap)
    members = buffer_members(analysis)
    outputs = {analysis.tensors[t].buffer for t in analysis.outputs}
    for root, group in by_root.items():
        rerouted = {(s.tensor, c) for s in group for i in s.swap_ins for c in i.consumers}
        near = where[analysis.tensors[root].producer]
        for member in members.get(root, [root]):
            for consumer in analysis.tensors[member].consumers:
                if (member, consumer) not in rerouted:
                    near = max(near, where[consumer[0]])
        if root in outputs:
            near = len(where)
        ins = sorted(
            ((where[i.trigger], s, i) for s in group for i in s.swap_ins), key=lambda x: x[0]
        )
        for position, swap, swap_in in ins:
            if position < near:  # back before the original is gone: read the original
                swap.swap_ins.remove(swap_in)
                _close_group(swap, swap_in.consumers, None)
                near = max(near, max(where[c] for c, _ in swap_in.consumers))
    return [s for s in swaps if s.swap_ins]


def _close_group(swap, group, trigger):
    if trigger is None:  # nothing runs between producer and consumer: swapping gains nothing
        swap.near_consumers = sorted(set(swap.near_consumers) | {c for c, _ in group})
        return
    swap.swap_ins.append(SwapIn(list(group), trigger))


def log_plan(analysis: Analysis, result: Plan) -> None:
    out_bytes = result.swapped_bytes(analysis)
    in_bytes = result.swapped_in_bytes(analysis)
    log.info(
        "Added %d operations to the model (%d swap-out operations (%.2f GiB) and %d swap-in "
        "operations (%.2f GiB))",
        result.swap_count + result.swap_in_count,
        result.swap_count,
        out_bytes / GiB,
        result.swap_in_count,
        in_bytes / GiB,
    )
