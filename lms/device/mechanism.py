"""How LMS moves bytes between the compute device and the host, behind one interface for swaps
and split ops' pieces (`Mechanism`), one implementation per device kind, chosen in one place
(`mechanism_for`):

- the emulated device: the host store (lms/device/host_store.py `HostStore`), whose py_funcs
  keep swapped tensors and pieces as host arrays (its pieces: lms/device/host_pieces.py);
- a GPU, and the two-device mode standing in for one: TensorFlow's own copies between the
  compute device and the host (lms/device/copies.py `DeviceCopy`, its pieces `DevicePieces`),
  laid out so that the partitioner's send/recv pairs run when the plan says (docs/lms.md, "The
  GPU path").

The rewriter asks a mechanism for a swap's nodes (lms/device/rewriter.py `SwapNodes`); the
splitter asks it for a graph's piece copies (`pieces()`, one tracker per graph, a `PieceCopies`
of lms/split/pieces.py); the wrapped step clears its `store` after each step.

`Mechanism` is a Protocol, not a base class: the implementations need not import this module,
which imports them to choose."""

from typing import Protocol

from lms.device.copies import DeviceCopy
from lms.device.host_store import HostStore
from lms.device.rewriter import SwapNodes
from lms.device.target import Target
from lms.errors import ParameterError
from lms.split.pieces import PieceCopies
from lms.values.link import Link


class Mechanism(SwapNodes, Protocol):
    """Swaps (`swap_out_nodes`, `swap_in_nodes`: the NodeDefs of one swap) and pieces
    (`pieces()`) on one device kind.

    kind: "host-store" or "device-copy".
    store: the emulated device's host store (its arrays are freed after each step, and it
        counts the traffic); None with TensorFlow's copies, which free themselves.
    keeps_ops: whether the ops LMS adds must be kept from Grappler as the step's control
        outputs (TensorFlow's copies are Identities Grappler would otherwise remove).
    copies_lists: whether its copies move a loop's tensor list as it is (TensorFlow's, element
        by element); else lms/device/lists.py stacks the list for them.
    host_device, compute_device: where host copies live and the step computes (the target's).
    transfer_cost: an `lms.Link`, what one swap-out or swap-in costs the step (its latency and
        bytes per second), for choosing among plans that fit (lms/tuning/prune.py).
    swaps: what `rewrite` takes to make the swaps' nodes: the mechanism itself."""

    kind: str
    host_device: str
    compute_device: str | None
    transfer_cost: Link

    @property
    def store(self) -> HostStore | None: ...

    @property
    def swaps(self) -> SwapNodes: ...

    def pieces(self) -> PieceCopies:
        """A fresh tracker of one graph's piece copies (a split op's input kept, its pieces read
        and stored, its output assembled; `finish` once the graph is split)."""


def mechanism_for(target: Target, link=None, disk=None) -> Mechanism:
    """The mechanism of `target`'s device kind. `link` (an `lms.Link`) slows the emulated
    device's host store to a link's speed, and `disk` (a directory) takes the store's arrays
    beyond the host's memory; with TensorFlow's copies both are refused: they move at the real
    link's, into TensorFlow's pinned host memory."""
    if target.device_copies:
        if link is not None:
            raise ParameterError(
                "link emulates a link on the emulated device; this LMS copies through "
                f"TensorFlow's own copies ({target.kind})"
            )
        if disk is not None:
            raise ParameterError(
                "host_disk keeps the emulated device's host arrays on a disk; this LMS keeps "
                f"them in TensorFlow's pinned host memory ({target.kind}), which has no disk tier"
            )
        return DeviceCopy(target.host_device, target.compute_device)
    return HostStore(link, target.host_device, target.compute_device, disk)
