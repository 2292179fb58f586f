"""How LMS moves bytes between the compute device and the host, behind one interface for swaps
and split ops' pieces, chosen per device kind in one place (`mechanism_for`):

- the emulated device: the host store (lms/device/swap.py `HostStore`), whose py_funcs keep
  swapped tensors and pieces as host arrays;
- a GPU, and the two-device mode standing in for one: TensorFlow's own copies between the
  compute device and the host (`DeviceCopy`, `DevicePieces`), laid out so that the partitioner's
  send/recv pairs run when the plan says (docs/lms.md, "The GPU path").

The rewriter asks a mechanism for a swap's nodes; the splitter asks it for a graph's piece
copies (`pieces`, one tracker per graph); the wrapped step clears its `store` after each step."""

from dataclasses import dataclass

from lms.device.swap import DeviceCopy, HostStore, SwapMechanism
from lms.device.target import Target
from lms.errors import ParameterError
from lms.split.ops import DevicePieces, HostPieces


@dataclass(frozen=True)
class Mechanism:
    """Swaps (`swaps`: the NodeDefs of one swap) and pieces (`pieces()`) on one device kind.

    store: the emulated device's host store (its arrays are freed after each step, and it
        counts the traffic); None with TensorFlow's copies, which free themselves.
    keeps_ops: whether the ops LMS adds must be kept from Grappler as the step's control
        outputs (TensorFlow's copies are Identities Grappler would otherwise remove)."""

    kind: str  # "host-store" | "device-copy"
    swaps: SwapMechanism
    store: HostStore | None
    host_device: str
    compute_device: str | None

    @property
    def keeps_ops(self) -> bool:
        return self.swaps.keeps_ops

    def pieces(self):
        """A fresh tracker of one graph's piece copies (a split op's input kept, its pieces read
        and stored, its output assembled): `HostPieces` over the store, else `DevicePieces`."""
        if self.store is not None:
            return HostPieces(self.store)
        return DevicePieces(self.host_device, self.compute_device)


def mechanism_for(target: Target, link=None) -> Mechanism:
    """The mechanism of `target`'s device kind. `link` (an `lms.Link`) slows the emulated
    device's host store to a link's speed; with TensorFlow's copies it is refused: they move at
    the real link's."""
    if target.device_copies:
        if link is not None:
            raise ParameterError(
                "link emulates a link on the emulated device; this LMS copies through "
                f"TensorFlow's own copies ({target.kind})"
            )
        swaps = DeviceCopy(target.host_device, target.compute_device)
        return Mechanism("device-copy", swaps, None, target.host_device, target.compute_device)
    store = HostStore(link)
    return Mechanism("host-store", store, store, target.host_device, target.compute_device)
