"""A total order for the step's ops, enforced by control dependencies (`ordering=1`).

Left free, TensorFlow's executor runs every ready op as soon as it can: parallel branches (a
residual block's shortcut and main path, a backward pass's two gradient paths) advance side by
side, each holding its large tensors, and the order (so the peak) changes from run to run — on
the CPU the measured peak of one plan varied by up to 1.7x over three processes. A depth-first
order finishes one branch before it starts the next; chained by control dependencies it is the
order that runs, so the simulation can be exact about it, distances (swapout_threshold,
swapin_ahead, swapin_groupby) count ops rather than levels, and a swap-in comes back exactly
`swapin_ahead` ops before its reader. ResNet50 at 8000² with everything swapped: a simulated
peak of 31.4 GiB left free, 16.3 GiB ordered (largest op and resident variables: 16.2 GiB).
"""

import numpy as np

from lms.analysis import Analysis, dependencies


def depth_first_order(analysis: Analysis) -> np.ndarray:
    """A topological order (data and control edges) that runs the op made ready last first; of
    the ops one op makes ready, the one with the smallest outputs first (a convolution's filter
    gradient before its input gradient: the large input gradient is then not yet held while the
    filter gradient runs on the same inputs)."""
    if "depth_first" not in analysis.cache:
        ops, tensors = analysis.ops, analysis.tensors
        pending, successors = dependencies(ops, tensors)
        produced = [sum(tensors[t].bytes for t in op.outputs) for op in ops]
        for following in successors:
            # pushed largest first, so popped smallest first (ties: creation order)
            following.sort(key=lambda s: (produced[s], s), reverse=True)
        stack = [i for i in range(len(ops) - 1, -1, -1) if pending[i] == 0]
        order = []
        while stack:
            index = stack.pop()
            order.append(index)
            for s in successors[index]:
                pending[s] -= 1
                if pending[s] == 0:
                    stack.append(s)
        analysis.cache["depth_first"] = np.array(order, dtype=np.int64)
    return analysis.cache["depth_first"]


def positions(order: np.ndarray) -> np.ndarray:
    """Each op's position in `order`."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return position


def order_positions(analysis: Analysis) -> np.ndarray:
    """Each op's position in the depth-first order: its step when that order is enforced."""
    if "order_positions" not in analysis.cache:
        analysis.cache["order_positions"] = positions(depth_first_order(analysis))
    return analysis.cache["order_positions"]


# Left out of the chain: Grappler's dependency optimizer removes these and moves their control
# edges to their neighbours, which made cycles of the chain (GoogLeNet: "1570 nodes in a cycle").
UNCHAINED_OPS = frozenset({"Identity", "IdentityN", "NoOp"})
# Not swap-in triggers either: a Const's control edges do not hold it in place after Grappler
# (a swap-in held back by a batch norm's reduction indices came back early; yet taking Consts out
# of the chain let ResNet50's measured peak grow by 29 %: they stay chained).
UNTIMED_OPS = UNCHAINED_OPS | {"Const"}


def trigger_ops(analysis: Analysis) -> np.ndarray:
    """Whether each op can hold a swap-in back in an enforced order: it runs, in its place."""
    if "triggers" not in analysis.cache:
        untimed = np.fromiter(
            (op.type in UNTIMED_OPS or not op.inputs for op in analysis.ops),
            bool,
            len(analysis.ops),
        )
        analysis.cache["triggers"] = executed_ops(analysis) & ~untimed
    return analysis.cache["triggers"]


def executed_ops(analysis: Analysis) -> np.ndarray:
    """Whether each op runs (`OpInfo.runs`: TensorFlow prunes the rest; chaining them into the
    order would make them run)."""
    if "executed" not in analysis.cache:
        analysis.cache["executed"] = np.fromiter(
            (op.runs for op in analysis.ops), bool, len(analysis.ops)
        )
    return analysis.cache["executed"]
