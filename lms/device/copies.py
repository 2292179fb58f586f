"""The mechanism of a GPU, and of the two-device mode standing in for one (lms/device/target.py):
TensorFlow's own copies between the compute device and its host, for swaps (`DeviceCopy`) and
for split ops' pieces (`DevicePieces`), laid out so that the partitioner's send/recv pairs run
when the plan says (docs/lms.md, "The GPU path"; ../shared/gpu-desk-check.md B1, B2, F3).

Every op either makes is an Identity, slice or concat that Grappler's dependency optimizer may
bypass, so both keep their ops from Grappler as the step's control outputs (`keeps_ops`,
lms/device/rewriter.py `keep_from_grappler`). Nothing is held outside TensorFlow: its allocator
frees the host copies after their last reader (no `store`)."""

import tensorflow as tf

from lms.device import rewriter
from lms.device.nodes import node, type_attr
from lms.graph.names import PIECE_IN, PIECE_OUT, SWAP_IN, SWAP_IN_COPY, SWAP_OUT
from lms.split.rewrite import running_ops
from lms.values.link import LINKS


class DeviceCopy:
    """TensorFlow's copies as an `lms.device.mechanism.Mechanism`: the swaps' nodes here, the
    pieces' copies by `pieces()`.

    - swap-out: an Identity on the host. The partitioner's send/recv pair on its in-edge is the
      device-to-host copy; the Identity runs once the copy is on the host.
    - swap-in: an Identity on the host, held back by the trigger (its first node), then an
      Identity on the compute device. The host-to-device copy is the send/recv pair between the
      two: the host side's `_Send` runs only after the gated Identity, so the copy cannot start
      before the trigger has run. (Gating an Identity on the device gates nothing: its `_Recv`
      has no inputs and copies as soon as the host copy exists.) The device Identity forwards the
      copied buffer; ops that must wait for the copy to be on the device wait for it.

    Grappler's dependency optimizer bypasses Identities that add no cross-device edge; the
    rewriter therefore makes every node here a control output of the step (`keeps_ops`), which
    Grappler preserves."""

    kind = "device-copy"
    keeps_ops = True  # its nodes must be the step's control outputs (lms/device/rewriter.py)
    # a tensor list's copy between devices moves its elements one by one (TensorFlow's variant
    # device copy, as when a list crosses devices): no stacked copy on the device
    copies_lists = True
    store = None  # TensorFlow frees its copies itself

    def __init__(self, host_device: str = "/device:CPU:0", compute_device: str = "/device:GPU:0"):
        self.host_device, self.compute_device = host_device, compute_device
        # what a transfer costs, for choosing among plans (lms/tuning/prune.py): a PCIe 3.0 x16
        # link's, the most common one; the ranking of plans depends little on which link
        self.transfer_cost = LINKS["pcie3"][1]

    @property
    def swaps(self) -> "DeviceCopy":
        """What makes a swap's nodes (`rewrite`'s argument): this mechanism itself."""
        return self

    def pieces(self) -> "DevicePieces":
        """A fresh tracker of one graph's piece copies."""
        return DevicePieces(self.host_device, self.compute_device)

    def swap_out_nodes(self, prefix, source, tensor, readers):
        dtype = type_attr(tensor.dtype)
        return [node(f"{prefix}{SWAP_OUT}", "Identity", [source], self.host_device, T=dtype)]

    def swap_in_nodes(self, prefix, stored, tensor):
        dtype = type_attr(tensor.dtype)
        gated = node(f"{prefix}{SWAP_IN}", "Identity", [stored], self.host_device, T=dtype)
        copy = node(
            f"{prefix}{SWAP_IN_COPY}", "Identity", [gated.name], self.compute_device, T=dtype
        )
        return [gated, copy]


class DevicePieces:
    """A graph's piece copies through TensorFlow's copies (a `PieceCopies`, lms/split/pieces.py):
    the input kept as a host copy (an Identity on the host device), each piece's slice cut on
    the host and copied to the compute device, each piece's result copied back, the output
    concatenated on the host. A piece's host slice waits for the previous piece's store, so its
    host-to-device copy (the send/recv after the slice) cannot start earlier. Every op made here
    is listed in `made`; `finish` keeps those that run from Grappler as the step's control
    outputs."""

    keeps_ops = True
    # every piece made (no loops: lms/split/looped.py): these copies are placed per op, on the
    # host and on the device, and how such placements fare inside a loop body lowered into the
    # step's control flow was not worked out
    loops = False

    def __init__(self, host_device: str = "/device:CPU:0", compute_device: str = "/device:GPU:0"):
        self.host_device, self.compute_device = host_device, compute_device
        self._outputs = {}  # a split op's combined output (ref) -> its host concat
        self.made = []  # every op made, for the step's control outputs

    def _made(self, tensor):
        self.made.append(tensor.op)
        return tensor

    def keep(self, tensor, readers: int):
        if tensor.ref() in self._outputs:  # another split op's output: read on the host
            return self._outputs[tensor.ref()]
        with tf.device(self.host_device):
            return self._made(tf.identity(tensor, name=PIECE_OUT))

    def read(self, kept, like, axis: int, start: int, stop: int):
        with tf.device(self.host_device):
            index = [slice(None)] * like.shape.rank
            index[axis] = slice(start, stop)
            piece = self._made(kept[tuple(index)])
        with tf.device(self.compute_device):
            return self._made(tf.identity(piece, name=PIECE_IN))

    def store_piece(self, stored, piece, axis: int, start: int, shape: list):
        with tf.device(self.host_device):
            return [*(stored or []), self._made(tf.identity(piece, name=PIECE_OUT))]

    def token(self, stored):
        return stored[-1]

    def assemble(self, stored, like, axis: int):
        with tf.device(self.host_device):
            host = self._made(tf.concat(stored, axis=axis))
        with tf.device(self.compute_device):
            whole = self._made(tf.identity(host, name=PIECE_IN))
        self._outputs[whole.ref()] = host
        return whole

    def replaced(self, op, whole) -> None:
        """Nothing to count: TensorFlow frees the host concat after its last reader. (Split
        ops that read `whole` and were split before it still copy it to the host.)"""

    def finish(self, graph) -> None:
        """The ops made that run (`running_ops`: a control output runs, so a pruned one must
        not become one) kept from Grappler as `graph`'s control outputs."""
        if not self.made:
            return
        running = running_ops(graph)
        rewriter.keep_from_grappler(graph, [op for op in self.made if op in running])
