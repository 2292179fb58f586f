"""suite/hosts/link.py: the host's side of the link in its description. The GPU's copies are
measured as swaps copy (pinned host buffers: the host's `_Recv` of a device tensor, inside a
tf.function). No GPU here: the copy functions run on two logical CPU devices (a fresh process),
where TensorFlow partitions them as between a GPU and its host; the timing by copy events is
read from a device plane written as the CUPTI collector writes one."""

import pytest
from gpu_plane import add_gpu_plane, real_space
from lms_cases import run_child

from suite.hosts.link import best_copy_seconds, measure_gpu_copies, measure_memcpy


def test_memcpy_is_measured_per_size():
    rates = measure_memcpy((2**20, 2**22))
    assert len(rates) == 2 and all(rate > 0 for rate in rates)


def _edge_source(node) -> str:
    return node["tensor_name"].split("_", 2)[2]  # "edge_<id>_<source>"


def test_the_round_trip_copies_from_the_hosts_recv_of_a_device_tensor():
    """On /CPU:1 (the device) and /CPU:0 (the host): the host's Identity reads the `_Recv` of the
    device's argument (on a GPU, a pinned buffer), and the copy back leaves from that Identity
    (so from the pinned buffer) for a `_Recv` on the device. Measured there, nothing records a
    copy event: the wall clock times each copy, and pinned memory is not claimed."""
    _, found = run_child("_two_device_copies.py", "round-trip")
    host = next(p for p in found["partitions"] if p["device"].endswith("CPU:0"))
    device = next(p for p in found["partitions"] if p["device"].endswith("CPU:1"))
    nodes = {n["name"]: n for n in host["nodes"]}
    recv = next(n for n in host["nodes"] if n["op"] == "_Recv")
    assert _edge_source(recv) == "x"  # the device tensor, the function's argument
    identity = next(n for n in host["nodes"] if n["op"] == "Identity")
    assert identity["input"] == [recv["name"]]
    send = next(n for n in nodes.values() if n["op"] == "_Send")
    assert send["input"] == [identity["name"]]
    back = next(n for n in device["nodes"] if n["op"] == "_Recv")
    assert back["tensor_name"] == send["tensor_name"]
    assert any(n["op"] == "_Send" and n["input"] == ["x"] for n in device["nodes"])
    measured = found["measured"]
    assert (measured["timed_by"], measured["pinned"]) == ("wall time", None)
    for direction in ("host_to_device_gbps", "device_to_host_gbps"):
        assert len(measured[direction]) == 2 and all(rate > 0 for rate in measured[direction])


def test_the_copy_events_time_each_way_by_its_fastest_copy():
    """The copy engine's own durations, read from a device plane as the collector writes it
    (through lms's public profile): each way, the fastest of the copies; kernels are no copy."""
    from lms.timing.profile import step_profile

    events = []
    for repeat in (1.5, 1.0, 1.2):
        events.append(("MemcpyD2H", 2**26, 3e-3 * repeat, "x/_1:_Send", None))
        events.append(("MemcpyH2D", 2**26, 2.7e-3 * repeat, "Identity/_4:_Recv", None))
    events.append(("volta_sgemm_128x64_nn", None, 1e-6, "MatMul:MatMul", None))
    space = add_gpu_plane(real_space(), events)
    best = best_copy_seconds(step_profile(space).copies)
    assert best == {"out": pytest.approx(3e-3), "in": pytest.approx(2.7e-3)}


@pytest.mark.gpu
def test_on_a_gpu_the_link_is_timed_by_copy_events_on_pinned_buffers():
    """GPU only (skipped here): the copy events time every size each way, and each copy's host
    side is pinned memory (the collector's memory kind), as a swap's is."""
    import tensorflow as tf

    from lms.observe.copy_events import copy_events
    from lms.observe.xspace import profiled_space
    from suite.hosts.link import copy_functions

    measured = measure_gpu_copies(0, sizes=(2**20, 2**26))
    assert (measured["timed_by"], measured["pinned"]) == ("copy events", True)
    for direction in ("host_to_device_gbps", "device_to_host_gbps"):
        assert all(rate > 0 for rate in measured[direction])
    round_trip, _, _ = copy_functions("/device:GPU:0")
    with tf.device("/device:GPU:0"):
        x = tf.ones([2**20], tf.float32)
    round_trip(x)
    copies = copy_events(profiled_space(round_trip, x))
    assert sorted(c.direction for c in copies if c.bytes == 2**22) == ["in", "out"]
    assert {c.host_memory for c in copies if c.bytes == 2**22} == {"pinned"}
    assert all(c.op and c.op.rsplit("/", 1)[-1].startswith("_") for c in copies)  # send/recv
