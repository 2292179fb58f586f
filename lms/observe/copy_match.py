"""Which of TensorFlow's `_Send`/`_Recv` pairs are LMS's swaps, read from the partition graphs of
a call's run metadata (`LMSFunction.run_metadata`).

With device copies (a GPU, or the two-device mode) a swap's bytes move through a pair the
partitioner put on the cross-device edge, not through the swap op itself (lms/device/copies.py
`DeviceCopy`):

- swap-out: producer (device) -> `.../lms_swapout` (host). The pair is named after the edge's
  source, the producer: `Relu/_3` (`_Send`, on the device) and `Relu/_4` (`_Recv`, on the host,
  read by the swap-out), both with tensor_name `edge_9_Relu`.
- swap-in: `.../lms_swapin` (host, gated by its trigger) -> `.../lms_swapin_copy` (device). The
  pair is named after the gated Identity: `lms/s0/g0/lms_swapin/_9` and `.../_10`.

On a GPU the profiler annotates each copy event with the `_Send` or the `_Recv` of its pair (its
`tf_op` stat), so `copy_names` is what matches copy events to swaps (lms/observe/copy_events.py
`swap_copies`, lms/timing/profile.py `step_profile`). A swap is named as the step-time model names
its transfer (lms/timing/steptime.py `SwapGraph`): the swap-out op, or the host-side swap-in op.

The partitioner names its nodes from a per-graph counter, so the names are the same at every
instantiation of the same optimized graph (checked on two logical devices: two instantiations,
and a profiled call, gave the same names).
"""

from dataclasses import dataclass

from lms.graph.names import swap_kind

SENDS = ("_Send", "_HostSend")
RECVS = ("_Recv", "_HostRecv")


@dataclass(frozen=True)
class SwapCopy:
    """The send/recv pair that moved one swap's bytes."""

    transfer: str  # the swap op: "lms/s0/lms_swapout" or "lms/s0/g0/lms_swapin"
    direction: str  # "out" (device to host) or "in"
    send: str | None  # the `_Send` node's name (None: not found)
    recv: str | None
    tensor_name: str  # the pair's rendezvous key, "edge_<id>_<source>"


def _source(name: str) -> str:
    """ "op:1" / "^op" -> "op"."""
    return name.lstrip("^").split(":")[0]


def _key(node) -> tuple:
    attr = node.attr
    return (
        attr["tensor_name"].s.decode(),
        attr["send_device"].s.decode(),
        attr["recv_device"].s.decode(),
    )


def swap_copy_pairs(metadata) -> dict:
    """{transfer name: SwapCopy} of every swap whose pair is in the partition graphs of
    `metadata` (a RunMetadata): a swap-out by the `_Recv` its host op reads, a swap-in by the
    `_Send` that takes its host op's output to the device; the other end by the rendezvous key.
    A swap TensorFlow did not run across devices (removed, or placed on one device) is absent."""
    found = {}
    for function_graph in metadata.function_graphs:
        nodes = [n for p in function_graph.partition_graphs for n in p.node]
        by_name = {n.name: n for n in nodes}
        sends = {_key(n): n.name for n in nodes if n.op in SENDS}
        recvs = {_key(n): n.name for n in nodes if n.op in RECVS}
        for node in nodes:
            data = [_source(i) for i in node.input if not i.startswith("^")]
            if swap_kind(node.name) == "out":
                for source in data:
                    recv = by_name.get(source)
                    if recv is not None and recv.op in RECVS:
                        key = _key(recv)
                        found[node.name] = SwapCopy(
                            node.name, "out", sends.get(key), recv.name, key[0]
                        )
            elif node.op in SENDS and data and swap_kind(data[0]) == "in":
                key = _key(node)
                found[data[0]] = SwapCopy(data[0], "in", node.name, recvs.get(key), key[0])
    return found


def copy_names(metadata) -> dict:
    """{send or recv node name: (transfer name, direction)} of the swaps' pairs in `metadata`
    (`swap_copy_pairs`): what a copy event's `tf_op` names, mapped to the swap it moved."""
    names = {}
    for pair in swap_copy_pairs(metadata).values():
        for name in (pair.send, pair.recv):
            if name is not None:
                names[name] = (pair.transfer, pair.direction)
    return names
