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

from lms.graph.reader import dependencies
from lms.graph.step import ALIAS_OPS, NO_BUFFER_OPS, VIEW_OPS, Analysis, CacheKey, Fact


def depth_first_order(analysis: Analysis) -> np.ndarray:
    """A topological order (data and control edges) that runs the op made ready last first; of
    the ops one op makes ready, the one that adds least to the device first: its outputs less
    the buffers it is the last to read (a convolution's filter gradient before its input
    gradient: the large input gradient is then not yet held while the filter gradient runs on
    the same inputs; and a filter gradient that frees its forward activation before the input
    gradient's chain, which would otherwise run to the input before it: ResNet50 224² b4,
    everything swapped, 283 MiB simulated instead of 239 when only outputs counted). An op
    waiting on the stack runs next once it is the last reader of a buffer, which then goes: the
    filter gradient, once the input gradient has run, frees the output gradient both read. An
    alias (a view, an Identity) runs as soon as it is ready: it allocates nothing, and its
    input's buffer then has no late reader of its own — the view's readers are what a plan
    swaps (a Conv1D's ExpandDims on a branch the order reaches late kept the WaveNet's gate
    products on the device through the forward pass). A constant runs just before its first
    reader, so that it holds back no op (the ExpandDims waited for its axis, a constant the
    order reached only after the branch)."""
    if CacheKey(Fact.DEPTH_FIRST) not in analysis.cache:
        ops, tensors = analysis.ops, analysis.tensors
        pending, successors = dependencies(ops, tensors)
        produced = [sum(tensors[t].bytes for t in op.outputs) for op in ops]
        free = [op.type in ALIAS_OPS for op in ops]
        # a constant runs just before its first reader, and never holds one back
        constant = [op.type == "Const" and pending[i] == 0 for i, op in enumerate(ops)]
        constants_of = [[] for _ in ops]
        for c in np.flatnonzero(constant):
            for s in successors[c]:
                pending[s] -= 1
                constants_of[s].append(int(c))
        # per buffer, the ops still to read it (any tensor living in it)
        roots_read = [{tensors[t].buffer for t in op.inputs} for op in ops]
        readers_of = [[] for _ in tensors]
        for i, roots in enumerate(roots_read):
            for r in roots:
                readers_of[r].append(i)
        reads_left = [len(readers) for readers in readers_of]
        for t in analysis.outputs:  # returned: never freed
            reads_left[tensors[t].buffer] += 1
        done = [False] * len(ops)
        order = []
        freeing = []  # ready ops that became a buffer's last reader: they run next

        def net(index: int) -> int:
            """What running `index` adds to the device: its outputs less the buffers it is the
            last to read."""
            freed = sum(tensors[r].bytes for r in roots_read[index] if reads_left[r] == 1)
            return produced[index] - freed

        def run(index: int, ready: list) -> None:
            """Put `index` in the order (its constants first) and the aliases it makes ready
            right after it; the other ops it makes ready go to `ready`."""
            for c in constants_of[index]:
                if not done[c]:
                    done[c] = True
                    order.append(c)
            done[index] = True
            order.append(index)
            for r in roots_read[index]:
                reads_left[r] -= 1
                if reads_left[r] == 1:
                    last = next((i for i in readers_of[r] if not done[i]), -1)
                    if last >= 0 and pending[last] == 0:
                        freeing.append(last)
            for s in successors[index]:
                pending[s] -= 1
                if pending[s] == 0:
                    if free[s]:
                        run(s, ready)
                    else:
                        ready.append(s)

        stack = [i for i in range(len(ops) - 1, -1, -1) if pending[i] == 0 and not constant[i]]
        while stack:
            index = stack.pop()
            if done[index]:  # run earlier, as a buffer's last reader
                continue
            ready = []
            run(index, ready)
            # pushed largest first, so popped smallest first (ties: creation order)
            ready.sort(key=lambda s: (net(s), s), reverse=True)
            stack.extend(ready)
            # a waiting op now the last to read a buffer runs next: the buffer goes (it is
            # also still where it waited: skipped there)
            stack.extend(i for i in freeing if not done[i])
            freeing.clear()
        order += [i for i in range(len(ops)) if not done[i]]  # constants nothing reads
        analysis.cache[CacheKey(Fact.DEPTH_FIRST)] = np.array(order, dtype=np.int64)
    return analysis.cache[CacheKey(Fact.DEPTH_FIRST)]


def positions(order: np.ndarray) -> np.ndarray:
    """Each op's position in `order`."""
    position = np.empty(len(order), dtype=np.int64)
    position[order] = np.arange(len(order))
    return position


def order_positions(analysis: Analysis) -> np.ndarray:
    """Each op's position in the depth-first order: its step when that order is enforced."""
    if CacheKey(Fact.ORDER_POSITIONS) not in analysis.cache:
        analysis.cache[CacheKey(Fact.ORDER_POSITIONS)] = positions(depth_first_order(analysis))
    return analysis.cache[CacheKey(Fact.ORDER_POSITIONS)]


# Left out of the chain: Grappler's dependency optimizer removes these and moves their control
# edges to their neighbours, which made cycles of the chain (GoogLeNet: "1570 nodes in a cycle").
UNCHAINED_OPS = frozenset({"Identity", "IdentityN", "NoOp"})
# Constants (`OpInfo.constant`: Consts and what Grappler folds into them) are neither chained
# (lms/device/rewriter.py: Grappler moves them to other readers) nor swap-in triggers: their
# control edges do not hold them in place (a swap-in held back by a batch norm's reduction
# indices came back early).
# Ops that never run as kernels of their own once Grappler is done: it folds or removes them
# (ResNet50 1024² b1's profiled step ran none of its 904 Reshapes, 159 Squeezes, 53 ShapeNs and
# 53 StopGradients; nor its 538 resource Placeholders, which become function arguments). A
# control edge to or from one is lost with it, as with a Const: the ops after them started as
# soon as their data was ready (a projection shortcut beside the main path, batch norm
# gradients' Tiles and Sums beside the Muls before them: 94 of 3,405 pairs of chained kernels
# overlapped). They stay chained, but no link of the chain relies on them alone (`anchor_ops`).
FOLDED_OPS = frozenset(
    {"Reshape", "Squeeze", "ExpandDims", "StopGradient", "PreventGradient", "Shape", "ShapeN"}
    | {"Size", "Rank", "Placeholder", "Snapshot", "EnsureShape"}
)


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


def neighbours(analysis: Analysis, group) -> set:
    """Ops a graph pass could fuse with one of `group`'s (`op_neighbours`, each op's worked out
    once per analysis: the planner asks for them for every swap-in of every plan it tries)."""
    if CacheKey(Fact.NEIGHBOURS) not in analysis.cache:
        analysis.cache[CacheKey(Fact.NEIGHBOURS)] = {}
    known = analysis.cache[CacheKey(Fact.NEIGHBOURS)]
    near = set()
    for op in group:
        if op not in known:
            known[op] = frozenset(op_neighbours(analysis, op))
        near |= known[op]
    return near


def op_neighbours(analysis: Analysis, op: int) -> set:
    """Ops a graph pass could fuse with `op`: for a fusion tail, the producer of an input only
    it reads, if that is a fusion head or tail (Keras 2's SGD adds a Mul's output to a variable:
    nothing fuses those, and taking the Mul for a neighbour kept every momentum product of the
    3D U-Net on the device, +12 % on its lowest ordered peak); and ops beside it on the same
    input where either is of SIBLING_FUSED_OPS. Any other fusion TensorFlow may do makes the
    step fall back to its own order (lms/function.py)."""
    near = set()
    for t in analysis.ops[op].inputs:
        tensor = analysis.tensors[t]
        readers = {c for c, _ in tensor.consumers}
        fusable = analysis.ops[tensor.producer].type in FUSION_HEAD_OPS | FUSED_TAIL_OPS
        if readers == {op} and analysis.ops[op].type in FUSED_TAIL_OPS and fusable:
            near.add(tensor.producer)
        if analysis.ops[op].type in SIBLING_FUSED_OPS:
            near.update(readers)
        else:
            near.update(c for c in readers if analysis.ops[c].type in SIBLING_FUSED_OPS)
    return near


# Ops a graph pass fuses with fusion tails (FUSED_TAIL_OPS) reading their output: Grappler's
# remapper and oneDNN's layout pass (convolution, matrix product or batch norm + bias + add +
# activation), and the filter gradient oneDNN fuses with the BiasAddGrad beside it.
FUSION_HEAD_OPS = frozenset(
    {"Conv2D", "Conv3D", "DepthwiseConv2dNative", "MatMul", "BatchMatMul", "BatchMatMulV2"}
    | {"BatchMatMulV3", "Conv2DBackpropFilter", "Conv3DBackpropFilterV2"}
    | {f"FusedBatchNorm{v}" for v in ("", "V2", "V3")}
)


# Fused ops end at an activation and take one addition (Grappler's remapper: convolution or
# matrix product + bias + add + activation), with no view between (a Conv1D is ExpandDims +
# Conv2D + Squeeze + BiasAdd: the remapper's pattern needs the BiasAdd to read the Conv2D).
# Without these limits a sum of many branches' outputs (a WaveNet's skip connections, a chain
# of AddV2) made one "fusion" of every branch: none of their ops could trigger a swap-in, and
# the WaveNet's swap-ins all came back at the first.
ADD_OPS = frozenset({"AddV2", "Add"})
FINAL_TAIL_OPS = frozenset({"Relu", "Relu6", "Elu", "LeakyRelu", "Tanh", "Sigmoid"})


def fusion_helpers(analysis: Analysis) -> np.ndarray:
    """Whether each op feeds an op that a graph pass could fuse with an op before it in the
    depth-first order, and sits between the two (a convolution's bias, read by the BiasAdd after
    it). Chained after the earlier op, such an op would make the fused op wait for itself:
    TensorFlow refuses the graph ("nodes in a cycle"; ResNet50: every convolution's bias)."""
    if CacheKey(Fact.FUSION_HELPERS) not in analysis.cache:
        ops, tensors = analysis.ops, analysis.tensors
        where = order_positions(analysis)
        helper = np.zeros(len(ops), dtype=bool)
        for head, op in enumerate(ops):
            if op.type not in FUSION_HEAD_OPS:
                continue
            group, frontier = {head}, [head]
            while frontier:  # the fusion tails reading the head's output, and theirs
                producer = frontier.pop()
                if ops[producer].type in FINAL_TAIL_OPS:  # nothing fuses after an activation
                    continue
                after_add = ops[producer].type in ADD_OPS
                # fusions read output 0 (a batch norm gradient reading the forward batch norm's
                # saved statistics is no tail of it: Keras 2's layer norms made their whole
                # forward-to-backward span fusion helpers)
                for t in ops[producer].outputs[:1]:
                    for reader, _ in tensors[t].consumers:
                        kind = ops[reader].type
                        if after_add and kind in ADD_OPS:  # one addition per fused op
                            continue
                        # a view between breaks the pattern (Conv1D's Squeeze)
                        tail = kind in FUSED_TAIL_OPS or kind in FOLDED_OPS - VIEW_OPS
                        if tail and reader not in group and where[reader] > where[head]:
                            group.add(reader)
                            frontier.append(reader)
            group |= neighbours(analysis, [head])  # siblings (a BiasAddGrad)
            start = min(where[g] for g in group)
            stack = [
                p
                for g in group
                for p in [tensors[t].producer for t in ops[g].inputs] + ops[g].control_inputs
            ]
            while stack:
                p = stack.pop()
                if p in group or helper[p] or where[p] <= start:
                    continue
                helper[p] = True
                stack.extend(tensors[t].producer for t in ops[p].inputs)
                stack.extend(ops[p].control_inputs)
        analysis.cache[CacheKey(Fact.FUSION_HELPERS)] = helper
    return analysis.cache[CacheKey(Fact.FUSION_HELPERS)]


def anchor_ops(analysis: Analysis) -> np.ndarray:
    """Whether each op holds its place in the enforced (depth-first) order when control edges
    say so, and matters there: it runs as a kernel of its own (not UNCHAINED_OPS, FOLDED_OPS, a
    constant, or without inputs), reads no variable alone (a ReadVariableOp allocates nothing),
    and is no fusion helper. Anchors are what the chain links directly, what triggers swap-ins
    and what waits for swaps."""
    if CacheKey(Fact.ANCHORS) not in analysis.cache:
        untimed = np.fromiter(
            (
                op.type in UNCHAINED_OPS
                or op.constant
                or op.type in FOLDED_OPS
                or op.type in NO_BUFFER_OPS
                or not op.inputs
                for op in analysis.ops
            ),
            bool,
            len(analysis.ops),
        )
        anchors = executed_ops(analysis) & ~untimed & ~fusion_helpers(analysis)
        analysis.cache[CacheKey(Fact.ANCHORS)] = anchors
    return analysis.cache[CacheKey(Fact.ANCHORS)]


def next_anchors(analysis: Analysis) -> np.ndarray:
    """Per op, the first anchor (`anchor_ops`) after it in the depth-first order, or -1: the op
    that waits for what is chained after it (a swap-out of its output, a swap-in it triggers)."""
    if CacheKey(Fact.NEXT_ANCHORS) not in analysis.cache:
        order = depth_first_order(analysis)
        count = len(order)
        anchored = anchor_ops(analysis)[order]
        # per position, the first anchored position at or after it (count: none)
        at = np.where(anchored, np.arange(count), count)
        first = np.minimum.accumulate(at[::-1])[::-1] if count else at
        after = np.append(first[1:], count)  # strictly after each position
        following = np.full(count + 1, -1, dtype=np.int64)
        following[:count] = order
        result = np.full(len(analysis.ops), -1, dtype=np.int64)
        result[order] = following[after]
        analysis.cache[CacheKey(Fact.NEXT_ANCHORS)] = result
    return analysis.cache[CacheKey(Fact.NEXT_ANCHORS)]


def executed_ops(analysis: Analysis) -> np.ndarray:
    """Whether each op runs (`OpInfo.runs`: TensorFlow prunes the rest; chaining them into the
    order would make them run)."""
    if CacheKey(Fact.EXECUTED) not in analysis.cache:
        analysis.cache[CacheKey(Fact.EXECUTED)] = np.fromiter(
            (op.runs for op in analysis.ops), bool, len(analysis.ops)
        )
    return analysis.cache[CacheKey(Fact.EXECUTED)]
