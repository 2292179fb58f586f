"""Plan swaps from an analysis and a parameter set (DESIGN.md §2.2).

A tensor is swapped out when a consumer sits more than `swapout_threshold` levels after its
producer. Its far consumers are grouped (`swapin_groupby`); each group reads one swap-in. The
swap-in's trigger is found by walking back from the group's first consumer along its
latest-level inputs, `swapin_ahead` steps: those are the ops that really run just before the
consumer late in the backward pass (any other input fires too early and moves no peak).
"""

import logging
from dataclasses import dataclass, field

import numpy as np

from lms.analysis import Analysis, GiB
from lms.ordering import depth_first_order, order_positions, trigger_ops
from lms.parameters import Parameters

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
        return sum(analysis.tensors[s.tensor].bytes for s in self.swaps)

    def swapped_in_bytes(self, analysis: Analysis) -> int:
        return sum(analysis.tensors[s.tensor].bytes * len(s.swap_ins) for s in self.swaps)


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
    if "ancestors" not in analysis.cache:
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
        analysis.cache["ancestors"] = (np.stack(table), level)
    return analysis.cache["ancestors"]


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


# Ops a graph pass fuses with another op reading the same input (oneDNN's layout pass: a filter
# gradient and the BiasAddGrad beside it become one _MklNativeConv2DBackpropFilterWithBias).
SIBLING_FUSED_OPS = frozenset({"BiasAddGrad"})
# Ops Grappler's remapper or oneDNN's layout pass fuse into the op producing their input
# (Conv2D + BiasAdd + Add + Relu, MatMul + BiasAdd + activation, batch norm + activation).
FUSED_TAIL_OPS = frozenset(
    {"BiasAdd", "BiasAddV1", "Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid", "AddV2", "Add"}
    | {f"FusedBatchNorm{v}" for v in ("", "V2", "V3")}
    | {f"FusedBatchNormGrad{v}" for v in ("", "V2", "V3")}
)


def _neighbours(analysis: Analysis, group) -> set:
    """Ops a graph pass could fuse with one of `group`'s: for a fusion tail, the producer of an
    input only it reads; and ops beside it on the same input where either is of
    SIBLING_FUSED_OPS. Any other fusion TensorFlow may do makes the step fall back to its own
    order (lms/api.py)."""
    near = set()
    for op in group:
        for t in analysis.ops[op].inputs:
            tensor = analysis.tensors[t]
            readers = {c for c, _ in tensor.consumers}
            if readers == {op} and analysis.ops[op].type in FUSED_TAIL_OPS:
                near.add(tensor.producer)
            if analysis.ops[op].type in SIBLING_FUSED_OPS:
                near.update(readers)
            else:
                near.update(c for c in readers if analysis.ops[c].type in SIBLING_FUSED_OPS)
    return near


def _ordered_trigger(analysis, where, runs_before, group, tensor, ahead) -> int | None:
    """In an enforced order: the op `ahead` places before the group's first reader, after the
    tensor's producer, one that runs in its place (see `trigger_ops`) and none the
    readers could be fused with by a later graph pass (the swap-in would then sit between two
    halves of one op: TensorFlow rejects the graph, "nodes in a cycle")."""
    producer = where[analysis.tensors[tensor].producer]
    first = min(where[c] for c in group)
    position = max(first - ahead, producer + 1)
    near = None
    while position > producer:
        trigger = runs_before[position]
        if trigger < 0 or where[trigger] <= producer:
            return None
        near = near if near is not None else _neighbours(analysis, group)
        if trigger not in near:
            return int(trigger) if where[trigger] < first else None
        position = where[trigger] - 1
    return None


def coordinates(analysis: Analysis, ordered: bool) -> np.ndarray:
    """Where each op sits for the distances of a plan: its position in the enforced order, or
    its level."""
    if ordered:
        return order_positions(analysis)
    if "levels" not in analysis.cache:
        levels = np.fromiter((op.level for op in analysis.ops), np.int64, len(analysis.ops))
        analysis.cache["levels"] = levels
    return analysis.cache["levels"]


def plan(analysis: Analysis, parameters: Parameters) -> Plan:
    """The swaps `parameters` (fully resolved: no -1 left) give on `analysis`."""
    if parameters.needs_tuning:
        raise ValueError("plan() needs resolved parameters; tune them first")
    threshold, groupby = parameters.swapout_threshold, parameters.swapin_groupby
    ahead = 1 if parameters.sync_mode & 2 else parameters.swapin_ahead
    order = depth_first_order(analysis) if parameters.ordered else None
    where = coordinates(analysis, order is not None)
    if order is not None:  # distances count ops of the order
        runs = trigger_ops(analysis)[order]
        # the latest op that can trigger at or before each position (-1: none)
        latest = np.maximum.accumulate(np.where(runs, np.arange(len(order)), -1))
        runs_before = np.where(latest >= 0, order[np.maximum(latest, 0)], -1)

        def trigger_of(group, tensor):
            return _ordered_trigger(analysis, where, runs_before, group, tensor, ahead)

    else:  # distances count levels

        def trigger_of(group, tensor):
            return find_trigger(analysis, group[0], tensor, ahead)

    swaps = []
    for t, info in enumerate(analysis.tensors):
        if not info.swappable or not info.consumers:
            continue
        level = where[info.producer]
        far = sorted(
            (c for c in info.consumers if where[c[0]] - level > threshold),
            key=lambda c: where[c[0]],
        )
        if not far:
            continue
        swap = Swap(t, near_consumers=sorted({c for c, _ in info.consumers} - {c for c, _ in far}))
        group, group_level = [], None
        for consumer in far:
            consumer_level = where[consumer[0]]
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
    return Plan(parameters, swaps, levels, order)


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
