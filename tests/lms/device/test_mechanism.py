"""lms/device/mechanism.py: `mechanism_for` chooses the device kind's mechanism in one place
(the emulated device's host store, else TensorFlow's copies), each has every member `Mechanism`
names and hands out a fresh piece tracker per graph; a link and a disk are refused with
TensorFlow's copies."""

import pytest

import lms
from lms.device.copies import DeviceCopy, DevicePieces
from lms.device.host_pieces import HostPieces
from lms.device.host_store import HOST_STORE_COST, HostStore
from lms.device.mechanism import Mechanism, mechanism_for
from lms.device.target import Target
from lms.errors import ParameterError
from lms.values.link import LINKS

EMULATED = Target("emulated", None, "/device:CPU:0", "CPU:0", None)
GPU = Target("gpu", "/device:GPU:0", "/device:CPU:0", "GPU:0", "CPU")
TWO_DEVICE = Target("two-device", "/device:CPU:1", "/device:CPU:0", None, "CPU:0")
# the interface's members, its swap part (lms.device.rewriter.SwapNodes) included
MEMBERS = {
    name
    for interface in Mechanism.__mro__
    if interface.__module__.startswith("lms.")
    for name in (*vars(interface), *vars(interface).get("__annotations__", {}))
    if not name.startswith("_")
}


def test_the_emulated_device_takes_the_host_store_for_swaps_and_pieces():
    link = lms.Link(1e9)
    mechanism = mechanism_for(EMULATED, link)
    assert isinstance(mechanism, HostStore) and mechanism.kind == "host-store"
    assert mechanism.store is mechanism.swaps is mechanism and mechanism.link is link
    assert not mechanism.keeps_ops
    first, second = mechanism.pieces(), mechanism.pieces()
    assert isinstance(first, HostPieces) and first is not second and first.store is mechanism
    assert mechanism.host_device == "/device:CPU:0" and mechanism.compute_device is None
    # what a transfer costs when plans are compared: the link's, else the store's own copies'
    assert mechanism.transfer_cost is link
    assert mechanism_for(EMULATED).transfer_cost == HOST_STORE_COST


@pytest.mark.parametrize("target", [GPU, TWO_DEVICE], ids=["gpu", "two-device"])
def test_a_gpu_and_two_devices_take_tensorflows_copies(target):
    mechanism = mechanism_for(target)
    assert isinstance(mechanism, DeviceCopy) and mechanism.kind == "device-copy"
    assert mechanism.store is None and mechanism.keeps_ops and mechanism.swaps is mechanism
    pieces = mechanism.pieces()
    assert isinstance(pieces, DevicePieces) and pieces is not mechanism.pieces()
    assert (pieces.host_device, pieces.compute_device) == (
        target.host_device,
        target.compute_device,
    )
    assert mechanism.transfer_cost == LINKS["pcie3"][1]
    with pytest.raises(ParameterError, match="link emulates"):
        mechanism_for(target, lms.Link(1e9))
    with pytest.raises(ParameterError, match="host_disk keeps the emulated device's"):
        mechanism_for(target, disk="/tmp")


def test_both_mechanisms_have_every_member_of_the_interface():
    assert {
        "kind",
        "host_device",
        "compute_device",
        "keeps_ops",
        "copies_lists",
        "transfer_cost",
        "store",
        "swaps",
        "pieces",
        "swap_out_nodes",
        "swap_in_nodes",
    } == MEMBERS
    for mechanism in (mechanism_for(EMULATED), mechanism_for(GPU)):
        missing = [name for name in MEMBERS if not hasattr(mechanism, name)]
        assert not missing, (mechanism.kind, missing)
