"""Split ops modelled in the analysis without being made (issue 44, item 1): each splitting
round (lms/split/fit.py) is decided and tuned on a copy of the step's analysis in which every op
decided so far is three ops, as split_op's pieces look to the simulator, so that the step's graph
is edited once, when the rounds have found a plan that fits.

Why: made in TensorFlow, a round's pieces took most of the planning time (GoogLeNet 4096²: about
400 While loops of pieces at 35 ms each, built in the rounds and again when chained, each round's
graph analysed afresh), and the rounds only need the memory the pieces take.

A split op X of n pieces becomes, in X's place in the order:

- its *keeps* (the first in X's index): one per input its pieces read in slices that no split
  op kept before (the made ops keep one host copy per tensor; a later one reads the earlier
  keep's token), each run when its input is made, as the host copy's put is (one keep for all
  held a concat's four inputs at once: GoogLeNet 4096², 208 MiB), each writing a token of 0
  bytes; a keep of another split op's output reads its pieces' token (its host array);
- its *pieces* (one op, like a loop of them): read the tokens and the inputs read whole (a
  filter), hold the largest piece's buffers while they run: its input slices with their halo
  rows, its output rows and its kernel's temporary, that share of X's (or the whole output for
  a sum, a filter's gradient, carried from piece to piece); a max pool gradient's pieces pool
  their own rows, so the pool recomputed for it (lms/graph/pool_reads.py) is pruned;
- its *assemble*: writes X's outputs whole, which X's readers read. An output that only split
  ops read stays on the host: 0 bytes here.

The host arrays are modelled as the made ops hold them (`Analysis.host_arrays`): a kept input
from its keep to the last pieces that read it, a split op's stored output (not a sum's) from
its pieces to its assemble and the last pieces that read it in place; once the chains are
known (`held_as_chained`), a chain's arrays until its last pieces, its members' rows that never
leave it not stored. Where a made chain's pieces run in the enforced order is not modelled:
the host peak comes out up to 20 % short of the made plan's (ResNet50 1856² b1, DenseNet121
2048²). It leaves out the pieces made one by one at the borders. Where a plan is to run, the
plan the rounds settle on is made, analysed and tuned for real (lms/split/fit.py
`split_modelled`), and splitting goes on from it when it does not fit; a plan only reported
with `LMS.plan_only(made=False)` (the suite's limit predictions) is the model's.
"""

import copy
import dataclasses
import math

from lms.graph.cpu_host import eigen_host
from lms.graph.kernels import EIGEN_2D_WORKING_SET, EIGEN_3D_OPS, EIGEN_RULES
from lms.graph.names import RECOMPUTE_SCOPE
from lms.graph.pool_reads import FORWARD_MAX_POOLS
from lms.graph.reader import assign_levels
from lms.graph.step import Analysis, CacheKey, Fact, OpInfo, TensorInfo
from lms.memory.lifetimes import kernel_holds
from lms.memory.simulator import simulate
from lms.split.layouts import layout
from lms.split.looped import piece_bounds
from lms.split.norm import NormLayout
from lms.split.rewrite import piece_scope, value_readers


def modelled(analysis: Analysis, decided: list, known: dict | None = None) -> Analysis:
    """A copy of `analysis` (of `analysis.graph`) with the ops `decided` ((op name, pieces), each
    one that can be split) modelled as split (module docstring). `analysis` is left as it is.
    `known`: a dict kept across calls on the same `analysis` (the rounds'), in which each split
    op's layout and largest piece are worked out once (GoogLeNet 4096² b1: 1,180 pieces' peaks
    for three rounds, where 391 ops were decided)."""
    graph = analysis.graph
    index = {op.name: i for i, op in enumerate(analysis.ops)}
    held = kernel_holds(analysis).per_op
    ops = [copy.copy(op) for op in analysis.ops]
    tensors = [copy.copy(t) for t in analysis.tensors]
    for t in tensors:
        t.consumers = list(t.consumers)
    split_at = {index[name]: pieces for name, pieces in decided}
    keeping, after = set(), {}  # every keep; split op index -> (its pieces, its assemble)
    shared = {}  # tensor index -> the token of the keep that put it on the host
    kept_arrays, stored_arrays = {}, {}  # token -> its host array's bytes (keeps; pieces)
    made_as = {}  # split op name -> (its pieces' op, their stored token)
    unread = []  # ops whose output a split op no longer reads
    for i, pieces in split_at.items():
        op, info = graph.get_operation_by_name(ops[i].name), ops[i]
        if known is None or (info.name, pieces) not in known:
            found = layout(op)
            kept = sorted(_kept_inputs(op, found))
            peak = _piece_peak(op, found, pieces, held[i], kept, analysis.kernels)
            if known is not None:
                known[info.name, pieces] = found, kept, peak
        else:
            found, kept, peak = known[info.name, pieces]
        scope = piece_scope(info.name)
        # one keep per kept input no split op kept before (their host copy is shared, as the
        # made ops share it), each when its input is made (the first one in op i's place)
        fresh, reused = [], {}
        for k in kept:
            t = info.inputs[k]
            if t in shared or any(info.inputs[f] == t for f in fresh):
                reused[k] = t
            else:
                fresh.append(k)
        keeps = [i] + [len(ops) + n for n in range(len(fresh) - 1)]
        loop = len(ops) + len(keeps) - 1
        assemble = loop + 1
        tokens = [_tensor(tensors, f"{scope}/kept_{n}", keep) for n, keep in enumerate(keeps)]
        shared |= {info.inputs[k]: tokens[n] for n, k in enumerate(fresh)}
        kept_arrays |= {tokens[n]: tensors[info.inputs[k]].bytes for n, k in enumerate(fresh)}
        others = sorted({shared[t] for t in reused.values()})  # tokens of earlier keeps
        # a max pool gradient's pieces pool their own rows (lms/split/halo.py, layouts.py)
        pooled = {1} - set(kept) if info.type in FORWARD_MAX_POOLS else set()
        whole = [k for k in range(len(info.inputs)) if k not in set(kept) | pooled]
        moved = {k: (keeps[n], 0) for n, k in enumerate(fresh)}
        moved |= {k: (loop, len(tokens) + len(others) + n) for n, k in enumerate(whole)}
        for k, t in enumerate(info.inputs):  # the inputs' readers: the keeps or the pieces
            entries = tensors[t].consumers
            entries.remove((i, k))
            if k in moved:
                entries.append(moved[k])
            elif k not in reused:  # a pool the pieces recompute from their own rows
                unread.append(tensors[t].producer)
        for n, keep in enumerate(keeps):
            read = [info.inputs[fresh[n]]] if fresh else []
            made = OpInfo(f"{scope}/keep_{n}", "LmsKeep", read, [], [tokens[n]])
            if keep == i:
                made.control_inputs = info.control_inputs
                ops[i] = made
            else:
                ops.append(made)
            tensors[tokens[n]].consumers = [(loop, n)]
        for n, token in enumerate(others):
            tensors[token].consumers.append((loop, len(tokens) + n))
        done = _tensor(tensors, f"{scope}/stored", loop)
        if getattr(found, "combine", "assemble") != "sum":  # its pieces stored on the host
            stored_arrays[done] = sum(tensors[t].bytes for t in info.outputs)
        inputs = tokens + others + [info.inputs[k] for k in whole]
        ops.append(OpInfo(f"{scope}/lms_pieces", "LmsPieces", inputs, [], [done]))
        ops[loop].temp_bytes, ops[loop].temp_parts = sum(peak), tuple(p for p in peak if p)
        ops.append(OpInfo(f"{scope}/assemble", "LmsAssemble", [done], [], list(info.outputs)))
        for t in info.outputs:
            tensors[t].producer = assemble
        tensors[done].consumers = [(assemble, 0)]
        keeping.update(keeps)
        after[i] = (loop, assemble)
        made_as[info.name] = (loop, done)
    for op in ops:  # an op that waited for a split op waits for its pieces
        if any(c in after for c in op.control_inputs):
            op.control_inputs = [after[c][0] if c in after else c for c in op.control_inputs]
    _prune(ops, tensors, unread)
    _read_in_place(ops, tensors, keeping, {assemble for _, assemble in after.values()})
    levels = assign_levels(ops, tensors)
    held = list(analysis.host_arrays) + _host_arrays(ops, tensors, kept_arrays, stored_arrays)
    # what `held_as_chained` holds the split ops' arrays again from, once the chains are known
    cache = {
        CacheKey(Fact.MODELLED_ARRAYS): (
            len(analysis.host_arrays),
            kept_arrays,
            stored_arrays,
            made_as,
        )
    }
    return dataclasses.replace(
        analysis,
        ops=ops,
        tensors=tensors,
        levels=levels,
        host_arrays=held,
        cache=cache,
        modelled=True,
    )


def reported_as_modelled(io, analysis, decided: list, known: dict) -> bool:
    """Whether a plan only reported is the model's (lms/split/fit.py `split_modelled`): where
    the model models the made pieces, alike pieces looping (`PieceCopies.loops` of `io`), with
    oneDNN's kernels, no fused batch norm split. Not with Eigen's, whose pieces made one by one
    at the borders hold a filter gradient's 30 MiB working set beside the op before (a test's
    step: 58.7 MB modelled, 82.2 made); not with a GPU's copies, every piece made (ResNet50
    16000² b1 in 32 GiB: 28.3 GiB modelled, 33.6 made); not with a fused batch norm split in
    two passes (lms/split/norm.py, Keras 2), whose host arrays the model is short of (four
    residual blocks: 11.5 MiB modelled, 19.9 made). `known`: the layouts `modelled` found."""
    if not io.loops or analysis.kernels == "eigen":
        return False
    return not any(isinstance(known[name, pieces][0], NormLayout) for name, pieces, *_ in decided)


def held_as_chained(model: Analysis, splits: list, tuned):
    """`model` (`modelled`'s) with its split ops' host arrays held as `splits`' chains hold
    them (`_chains`), and `tuned` with that host timeline: the same ops and tensors, so the
    same plan, device bytes and plan-independent facts."""
    if not any(split.chained_after for split in splits):
        return model, tuned
    base, kept, stored, made_as = model.cache[CacheKey(Fact.MODELLED_ARRAYS)]
    chains = _chains(model.graph, splits, made_as)
    held = model.host_arrays[:base] + _host_arrays(model.ops, model.tensors, kept, stored, *chains)
    cache = {k: v for k, v in model.cache.items() if k.fact is not Fact.HOST_ARRAYS}
    chained = dataclasses.replace(model, host_arrays=held, cache=cache)
    host = simulate(chained, tuned.plan).host
    return chained, dataclasses.replace(
        tuned, simulation=dataclasses.replace(tuned.simulation, host=host)
    )


def _chains(graph, splits, made_as: dict) -> tuple[list, set]:
    """The chains of `splits` (linked by `chained_after`, side ops with the member they sum
    over) as the model's pieces' ops: (per chain, the set of its members' and side ops'
    pieces ops; the stored tokens of members whose output only the chain reads)."""
    head, unstored = {}, set()
    after = {s.chained_after: s.op for s in splits if s.chained_after and not s.side}
    sides = {}
    for s in splits:
        if s.side:
            sides.setdefault(s.chained_after, set()).add(s.op)
        if s.chained_after:
            head[s.op] = head.setdefault(s.chained_after, s.chained_after)
    groups = {}
    for name, first in head.items():
        groups.setdefault(first, {first}).add(name)
    for before, member in after.items():
        readers = value_readers(graph.get_operation_by_name(before).outputs[0])
        outside = [
            c for c, _ in readers if c.name != member and c.name not in sides.get(before, ())
        ]
        if not outside and before in made_as:  # its rows pass on the device
            unstored.add(made_as[before][1])
    loops = [{made_as[n][0] for n in names if n in made_as} for names in groups.values()]
    return loops, unstored


def _host_arrays(
    ops: list, tensors: list, kept: dict, stored: dict, chains=(), unstored=frozenset()
) -> list:
    """The modelled split ops' host arrays (module docstring), as `Analysis.host_arrays`:
    (bytes, the ops that create, fill or read each). `kept`: each keep's token -> the bytes it
    puts on the host; `stored`: each pieces' stored token -> their outputs' bytes. A keep that
    reads a stored token (another split op's output, in place) is that array's reader.
    `chains` (`_chains`): an array a chain's pieces read or fill is held until the chain's
    last pieces (a made chain runs its members' pieces together, once every input of every
    member is there: the 3D U-Net 128³ b1's host peak was 5.4 GiB modelled alone, 7.3 made in
    chains); `unstored`: the stored tokens of chain members whose output never leaves it."""
    members = {done: [tensors[done].producer] for done in stored}
    arrays = []
    for token, size in kept.items():
        keep = tensors[token].producer
        readers = [c for c, _ in tensors[token].consumers]
        source = next((t for t in ops[keep].inputs if t in stored), None)
        if source is not None:  # a split op's output read in place: its array's reader
            members[source] += [keep, *readers]
        elif size:
            arrays.append((size, sorted({keep, *readers})))
    for done, size in stored.items():
        readers = [c for c, _ in tensors[done].consumers]
        if size and done not in unstored:
            arrays.append((size, sorted({*members[done], *readers})))
    chain_of = {loop: k for k, loops in enumerate(chains) for loop in loops}
    running = []
    for size, found in arrays:
        joined = {k for i in found if (k := chain_of.get(i)) is not None}
        found = sorted({*found, *(i for k in joined for i in chains[k])})
        running.append((size, [i for i in found if ops[i].runs]))
    return [(size, found) for size, found in running if found]


def _read_in_place(ops: list, tensors: list, keeping: set, assembles: set) -> None:
    """A split op's keep of another split op's output reads that op's host array in place, as
    the made ops do (lms/split/rewrite.py): it waits for the pieces' `stored` token, not for the
    output put together on the device. An output then read by no op but keeps is 0 bytes; one
    read by other ops too is put together for them alone, where the enforced order runs it.
    (Read through the assemble, the keeps made it run with the pieces and held it until its
    last reader: ResNet50 1856² b1's plan with ordering=1 came out at 732 MiB for 333 made.)"""
    redirected = set()
    for keep in keeping:
        op = ops[keep]
        for k, t in enumerate(op.inputs):
            producer = tensors[t].producer
            if producer not in assembles:
                continue
            done = ops[producer].inputs[0]
            tensors[t].consumers.remove((keep, k))
            tensors[done].consumers.append((keep, k))
            op.inputs[k] = done
            redirected.add(t)
    for t in redirected:
        if not tensors[t].consumers:  # read in place on the host alone
            tensors[t].bytes = 0


def _prune(ops: list, tensors: list, unread: list) -> None:
    """The recomputed pools (lms/graph/pool_reads.py) no op reads any more: pruned, as
    TensorFlow prunes them once their gradients are split."""
    while unread:
        op = ops[unread.pop()]
        if not op.runs or not op.name.startswith(f"{RECOMPUTE_SCOPE}/"):
            continue
        if any(tensors[t].consumers for t in op.outputs):
            continue
        op.runs, op.temp_bytes = False, 0
        for t in op.outputs:
            tensors[t].bytes = 0
        for t in op.inputs:
            tensors[t].consumers = [c for c in tensors[t].consumers if ops[c[0]] is not op]
            unread.append(tensors[t].producer)


def _tensor(tensors: list, name: str, producer: int) -> int:
    """A token tensor of 0 bytes made by op `producer`: its index."""
    tensors.append(TensorInfo(name, 0, producer, buffer=len(tensors)))
    return len(tensors) - 1


def _kept_inputs(op, found) -> set:
    """The inputs of `op` its pieces read in slices (a batch norm's: those as long as its split
    axis)."""
    if not isinstance(found, NormLayout):
        return set(found.kept)
    return {
        k
        for k, t in enumerate(op.inputs)
        if t.shape.rank and t.shape.rank > found.axis and t.shape[found.axis] == found.length
    }


def _piece_peak(op, found, pieces: int, temp: int, kept: list, kernels: str) -> tuple:
    """The largest piece's (input slices, output, kernel temporary) bytes (module docstring).
    A max pool gradient's also holds the pool it recomputes (of its incoming gradient's
    rows) and its input's rows padded, as its made body does (lms/split/halo.py)."""
    largest = (0, 0, 0)
    out = sum((t.shape.num_elements() or 0) * t.dtype.size for t in op.outputs)
    axis = found.axis if getattr(found, "read_axis", None) is None else found.read_axis
    for start, stop in piece_bounds(found.length, pieces):
        share = (stop - start) / found.length
        reads = {} if isinstance(found, NormLayout) else found.reads(start, stop)
        slices = {}
        for k in kept:
            tensor = op.inputs[k]
            size = (tensor.shape.num_elements() or 0) * tensor.dtype.size
            if k in reads and tensor.shape.rank and tensor.shape[axis]:
                lo, hi = reads[k]
                slices[k] = size * (hi - lo) // tensor.shape[axis]
            else:
                slices[k] = int(size * share)
        sliced = sum(slices.values())
        if op.type in FORWARD_MAX_POOLS:  # the pool recomputed, and its input padded (a copy)
            sliced += slices.get(2, 0) + slices.get(0, 0)
        output = out if found.combine == "sum" else int(out * share)
        piece = (sliced, output, _piece_temp(op, found, temp, stop - start, kernels))
        largest = max(largest, piece, key=sum)
    return largest


def _piece_temp(op, found, temp: int, rows: int, kernels: str) -> int:
    """A piece's kernel temporary: `temp` (the whole op's) in proportion to its `rows`, or
    with Eigen's kernels their rule (lms/graph/kernels.py) on the piece's shapes, which is
    not in proportion (a 2D gradient's working set is a fixed 30 MiB when it shards)."""
    share = rows / found.length
    rule = EIGEN_RULES.get(op.type) if kernels == "eigen" else None
    tensors = (*op.inputs, *op.outputs)
    if rule is None or not all(t.shape.is_fully_defined() for t in tensors):
        return int(temp * share)
    shapes = [t.shape.as_list() for t in tensors]
    for shape in shapes:
        if len(shape) > found.axis + 1:
            shape[found.axis] = max(1, math.ceil(shape[found.axis] * share))
    threads, l3 = eigen_host(op.type in EIGEN_3D_OPS)
    own = int(rule(shapes, op.outputs[0].dtype.size, threads, l3))
    if found.combine == "sum" and op.type not in EIGEN_3D_OPS:  # a 2D filter gradient's pieces
        # shard into the fixed working set as the whole op does, their halo rows added
        # (measured in made loops: 25.9-30.7 MiB where the rule on the rows alone gave 18.9)
        own = max(own, min(temp, EIGEN_2D_WORKING_SET))
    return own
