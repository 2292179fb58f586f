"""Consecutive split ops run as one chain, piece by piece (docs/lms.md, "Splitting"), so that a
chain's intermediate tensors stay on the device: only the chain's first inputs come from the
host and only the outputs something else reads go back to it.

Split one by one (lms/split/rewrite.py `split_op`), every split op reads its input slices from
the host and writes its pieces back, so a chain A -> B crosses the host between the two ops: A's
pieces are stored and B's read them back (on a GPU, a PCIe round trip per piece per op). Chained,
piece p of the chain is B's piece p, whose read of A's output is A's piece over the rows it asks
for (with the halo B's window needs: a piece of A computed again for the rows two of B's pieces
share, as streaming or tiled training does), recursively down the chain. A member's output goes
to the host only when something outside the chain reads it (a backward op, an op not split):
then each piece also stores the rows it owns, the next rows not stored yet, so that the stored
pieces tile the whole output once.

A chain is the ops a plan decided to split, linked A -> B where B reads A's output through one
of its sliced inputs, along the axis A is split on, and A's pieces are rows of its output
(`combine` "assemble", one stored row per row). Each op has at most one successor (its first
reader in the graph's order) and one predecessor. A link is made only when the chain stays one
step of the graph: none of B's other inputs may depend on the chain's first op (a backward op
whose incoming gradient depends on the forward op would wait for itself; recomputing a forward
op in its own gradient is not what a chain is for). The pieces are ordinary ops, so the
simulator, the tuner and the closed loop see a chain as they see every op.

A member's output can also feed split ops that sum over its rows (a filter's or a bias's
gradient reading an incoming gradient, `side_position`): such a side op's pieces run in the
chain's pieces over the rows the member owns (each row once), their sums carried like the
chain's, so that the member's rows need not go to the host for it and come back (GoogLeNet
4096² in 400 MiB stored 2.9 GB a step of ReluGrad outputs that only such ops read). A chain is
then its members, each followed by nothing or by its side ops, in one loop.
"""

from lms.planning.ordering import SIBLING_FUSED_OPS
from lms.split.chain_run import input_position, split_chain
from lms.split.layouts import ELEMENTWISE_OPS, layout, splittable
from lms.split.norm import NormLayout
from lms.split.pieces import PieceCopies
from lms.split.rewrite import SHAPE_OPS, Split, running_ops


def _linkable(before, after, position: int) -> bool:
    """Whether `after` (a layout) can read input `position` from `before`'s pieces on the
    device: `before` makes rows of its output along the axis `after` reads it along."""
    if isinstance(before, (str, NormLayout)) or isinstance(after, (str, NormLayout)):
        return False
    if before.combine != "assemble" or before.store_rows != 1 or position not in after.kept:
        return False
    read_axis = after.axis if after.read_axis is None else after.read_axis
    return read_axis == before.axis


# The ops that can be side ops: gradients of a filter or a bias, which only a step's update reads.
# Not the reductions of lms/split/views.py (a batch norm's moments): what reads a mean waits for
# all of it, so the member's output was held or swapped whole for it (MobileNetV2 2048² in
# 400 MiB: 10.5 GB a step more read from the host, 9.2 more written, 7.4 → 9.0 s a step). And
# images only: the 3D U-Net 96³'s side ops wrote 0.9 GB a step less and read 0.4 more, for no
# faster a step (23.6 against 23.2 s) and a measured peak 1.10x its simulated one (1.07 without).
SIDE_OPS = frozenset({"BiasAddGrad", "Conv2DBackpropFilter", "DepthwiseConv2dNativeBackpropFilter"})


def side_position(before, after, before_op, after_op) -> int | None:
    """The input of `after_op` (a split op whose pieces are summed: layout `after`) that reads
    `before_op`'s output (layout `before`) as a side op of its chain can (module docstring):
    once, along the rows `before` makes, its piece over rows [a, b) reading exactly rows
    [a, b) of it; else None."""
    if after_op.type not in SIDE_OPS or isinstance(after, (str, NormLayout)):
        return None
    if before_op.outputs[0].shape.rank != 4:  # images only (SIDE_OPS: a volume's were not faster)
        return None
    out = before_op.outputs[0]
    positions = [i for i, x in enumerate(after_op.inputs) if x is out]
    if len(positions) != 1 or not _linkable(before, after, positions[0]):
        return None
    length = before.length
    if after.length != length:
        return None
    samples = {(0, length), (0, 1), (length - 1, length), (length // 2, length // 2 + 1)}
    if any(after.reads(a, b).get(positions[0]) != (a, b) for a, b in samples if a < b):
        return None
    return positions[0]


def chains(graph, decided: list, sides: bool = True) -> list[list]:
    """The ops `decided` ((op name, pieces, why) each) grouped into chains (module docstring),
    each a list of those entries in the order its pieces run them, then its side ops when
    `sides`; ops in no chain alone. The chains come in the graph's order of their first op, so
    that a split op's producer is split before it (its readers then read its host array in
    place)."""
    ops = {name: graph.get_operation_by_name(name) for name, *_ in decided}
    entries = {entry[0]: entry for entry in decided}
    index = {op: k for k, op in enumerate(graph.get_operations())}
    layouts = {name: layout(op) for name, op in ops.items()}
    head, successor, clear = {name: name for name in ops}, {}, {}  # head: the chain's first
    ordered = sorted(ops, key=lambda n: index[ops[n]])
    # readers whose pieces are rows first (the chain can go on after them), then sums (a
    # filter's or bias's gradient: the chain ends there)
    for combine in ("assemble", "sum"):
        for name in ordered:
            if getattr(layouts[name], "combine", None) != combine or head[name] != name:
                continue
            op = ops[name]
            for position, tensor in enumerate(op.inputs):
                before = tensor.op.name
                if before not in ops or before in successor or before == name:
                    continue
                if sum(x is tensor for x in op.inputs) != 1:  # read whole too: needs it whole
                    continue
                if not _linkable(layouts[before], layouts[name], position):
                    continue
                first = ops[head[before]]
                others = [x.op for k, x in enumerate(op.inputs) if k != position]
                others += list(op.control_inputs)
                known = clear.setdefault(first, set())
                if any(_reaches(other, first, index, known) for other in others):
                    continue
                successor[before], head[name] = name, head[before]
                break
    _break_cycles(graph, ops, successor)
    found = []
    for name in sorted(ops, key=lambda n: index[ops[n]]):
        if any(successor.get(before) == name for before in successor):
            continue  # not a chain's first op
        chain = [entries[name]]
        while chain[-1][0] in successor:
            chain.append(entries[successor[chain[-1][0]]])
        found.append(chain)
    return _with_sides(graph, found, ops, layouts, index) if sides else found


def _with_sides(graph, found: list, ops: dict, layouts: dict, index: dict) -> list[list]:
    """`found` with, after each chain's members, the ops left alone that can sum over a
    member's rows in its pieces (`side_position`), each entry then (name, pieces, why, (k,
    position)): member k's output read at `position`. Not where that would make the chain
    wait for itself: a side op's other inputs may not depend on the chain, and no chain may be
    left in a cycle (a chain that is, gives its side ops back)."""
    alone = {chain[0][0] for chain in found if len(chain) == 1}
    taken = {}
    for chain in found:
        names = [entry[0] for entry in chain]
        first, known = ops[names[0]], set()
        for k, name in enumerate(names):
            after = ops[names[k + 1]] if k + 1 < len(names) else None
            if after is not None and after.type in SIBLING_FUSED_OPS:
                continue  # a filter gradient beside it would be fused with it (chain_run.py)
            for reader in ops[name].outputs[0].consumers():
                side = reader.name
                if side not in alone or side in taken or side in names:
                    continue
                position = side_position(layouts[name], layouts[side], ops[name], reader)
                if position is None:
                    continue
                others = [x.op for i, x in enumerate(reader.inputs) if i != position]
                others += list(reader.control_inputs)
                if any(_reaches(other, first, index, known) for other in others):
                    continue
                taken[side] = (names[0], k, position)
    if not taken:
        return found
    members = {ops[entry[0]]: chain[0][0] for chain in found for entry in chain}
    while True:  # give back the sides of chains left in a cycle, until none is
        chain_of = members | {ops[side]: head for side, (head, *_) in taken.items()}
        stuck = _in_cycles(graph, chain_of)
        given_back = [side for side, (head, *_) in taken.items() if head in stuck]
        if not given_back:
            break
        for side in given_back:
            del taken[side]
    single = {chain[0][0]: chain[0] for chain in found if len(chain) == 1}
    kept = []
    for chain in found:
        if len(chain) == 1 and chain[0][0] in taken:
            continue  # a side op now
        sides = [(s, k, p) for s, (head, k, p) in taken.items() if head == chain[0][0]]
        kept.append(chain + [(*single[s], (k, p)) for s, k, p in sides])
    return kept


def _break_cycles(graph, ops: dict, successor: dict) -> None:
    """Unlink until the graph with each chain as one node has no cycle: a chain reads every
    input from outside it before its first piece and gives its outputs after its last, so two
    chains that each read the other's output would wait for each other (a forward chain whose
    last op reads the loss gradient's Tile, whose chain reads the forward's output). Each pass
    cuts, in every chain left in a cycle, its last link."""
    while True:
        chain_of = {}
        for first in [n for n in ops if n not in successor.values()]:
            name = first
            while True:
                chain_of[ops[name]] = first
                if name not in successor:
                    break
                name = successor[name]
        stuck = _in_cycles(graph, chain_of)
        if not stuck:
            return
        for first in stuck:
            name, last_link = first, None
            while name in successor:
                last_link, name = name, successor[name]
            if last_link is not None:
                del successor[last_link]


def _in_cycles(graph, chain_of: dict) -> set:
    """The chains (by their first op's name) left in a cycle of the graph whose nodes are its
    ops with each chain's ops as one (Kahn's topological sort: what it cannot take)."""
    node = {op: chain_of.get(op, op) for op in graph.get_operations()}
    inputs = {}  # node -> the nodes it reads (with repeats: one per op's edge)
    for op in graph.get_operations():
        me = node[op]
        before = {node[t.op] for t in op.inputs} | {node[c] for c in op.control_inputs}
        inputs.setdefault(me, []).extend(b for b in before if b != me)
    left = _unsorted(inputs)
    # what is left lies on a cycle or after one: keep only what also leads back to one
    outputs = {n: [] for n in left}
    for n in left:
        for before in inputs[n]:
            if before in left:
                outputs[before].append(n)
    left = _unsorted(outputs)
    return {n for n in left if isinstance(n, str)}


def _unsorted(inputs: dict) -> set:
    """The nodes of `inputs` (node -> the nodes it waits for) a topological sort cannot take
    (Kahn's algorithm)."""
    needs = {n: len(before) for n, before in inputs.items()}
    readers = {}
    for n, before in inputs.items():
        for b in before:
            readers.setdefault(b, []).append(n)
    ready = [n for n, count in needs.items() if count == 0]
    while ready:
        for after in readers.get(ready.pop(), ()):
            needs[after] -= 1
            if needs[after] == 0:
                ready.append(after)
    return {n for n, count in needs.items() if count > 0}


def _reaches(op, first, index: dict, known: set) -> bool:
    """Whether `op` is `first` or depends on it (ops made before `first` cannot). `known`:
    ops found not to, kept across calls for the same `first`."""
    stack, seen = [op], set()
    while stack:
        x = stack.pop()
        if x is first:
            return True
        if x in known or x in seen or index.get(x, -1) < index[first]:
            continue
        seen.add(x)
        stack.extend(t.op for t in x.inputs)
        stack.extend(x.control_inputs)
    known |= seen
    return False


def only_readers(graph, decided: list, sums: bool = True) -> list:
    """For each op of `decided` whose output one op alone reads (shape reads aside), that reads
    it as a chain would and is not split: that reader, in as many pieces, to chain after it.
    Else the whole output would be put together on the device for it (its host copy read back
    whole): a convolution's BiasAdd, an input gradient's ReluGrad. An element-wise reader added
    is followed in turn by its own only reader when that is element-wise too (a BiasAdd's Relu:
    GoogLeNet 4096² in 400 MiB ended 38 chains at a BiasAdd, 1.2 GB a step stored and read back
    whole); not further: the plan was tuned for the ops decided, and an element-wise op in
    pieces holds less than whole, where a window op's pieces bring halos. Also, when `sums`,
    every reader not split that sums over the op's rows and reads nothing else in pieces
    (`side_position`: a bias's gradient), in as many pieces: a side op of the op's chain
    (GoogLeNet 4096²: 25 BiasAddGrads read back 1.1 GB whole)."""
    names, running, added = {name for name, *_ in decided}, running_ops(graph), []
    queue = [(graph.get_operation_by_name(name), pieces, False) for name, pieces, _ in decided]
    while queue:
        op, pieces, elementwise_only = queue.pop(0)
        op_layout = layout(op)
        readers = {c for c in op.outputs[0].consumers() if c in running}
        readers = sorted((c for c in readers if c.type not in SHAPE_OPS), key=lambda c: c.name)
        for reader in readers:
            if reader.name in names or splittable(reader):
                continue
            reader_layout = layout(reader)
            position = side_position(op_layout, reader_layout, op, reader) if sums else None
            # only a sum with nothing else to read (a bias's gradient): a filter's gradient not
            # split would need its other input on the host for the pieces
            if position is not None and set(reader_layout.kept) == {position}:
                names.add(reader.name)
                why = f"it sums over the rows of {op.name}, which is split: in its pieces"
                added.append((reader.name, pieces, why))
        if len(readers) != 1 or readers[0].name in names or splittable(readers[0]):
            continue
        reader = readers[0]
        if elementwise_only and reader.type not in ELEMENTWISE_OPS:
            continue
        position = input_position(reader, op.outputs[0])
        if _linkable(op_layout, layout(reader), position):
            names.add(reader.name)
            added.append((reader.name, pieces, f"its input {op.name} is split: chained after it"))
            # (images only: the 3D U-Net 96³ split 89 ops so, for no fewer host bytes and 23.2
            # s a step against 20.4 with 85; its side ops are left out too: SIDE_OPS)
            if reader.type in ELEMENTWISE_OPS and reader.outputs[0].shape.rank == 4:
                queue.append((reader, pieces, True))
    return added


def split_decided(
    graph, decided: list, io: PieceCopies, chained: bool = True, sides: bool = True, made=True
) -> list[Split]:
    """Split the ops `decided` ((op name, pieces, why) each) of `graph`, in chains
    (`chains`, with side ops when `sides`) when `chained`, else each alone; producers before
    their readers. With `made` False, `graph` is left as it is: the Splits it would make."""
    if chained:
        groups = chains(graph, decided, sides)
    else:
        index = {op.name: k for k, op in enumerate(graph.get_operations())}
        groups = [[entry] for entry in sorted(decided, key=lambda e: index[e[0]])]
    splits = []
    for group in groups:
        entries = [(graph.get_operation_by_name(name), *rest) for name, *rest in group]
        splits += split_chain(entries, io, made)
    return splits
