"""The GPU's copy events as the swap traffic's bandwidth (lms/observe/copy_events.py), and which of
them were LMS's swaps (lms/observe/copy_match.py). No GPU here: the closest real thing is this
machine's own profile (its XSpace, from TensorFlow's profiler), to which a device plane is added the
way tsl's cupti_collector writes one on a GPU; the `tf_op` names of its copies are the send/recv
nodes of a real step's swaps, partitioned by TensorFlow between two logical CPU devices (the
two-device
mode, in a fresh process)."""

import pytest
from gpu_plane import X, add_gpu_plane, real_space, step
from lms_cases import run_child

from lms.observe.copy_events import copy_events, copy_totals, swap_copies
from lms.timing.profile import profile_copies


@pytest.fixture(scope="module")
def two_device():
    """A small conv step with everything swapped, run on two logical CPU devices in a fresh
    process (tests/support/_two_device_copies.py): its swaps' send/recv pairs and more."""
    return run_child("_two_device_copies.py", "swaps")[1]


def test_a_cpu_profile_has_no_copy_events():
    assert profile_copies(step, X) == {}
    space = real_space()
    assert any(plane.name.startswith("/host:") for plane in space.planes)
    assert copy_totals(space) == {}


def test_copy_bytes_and_durations_per_direction_from_the_device_plane():
    space = add_gpu_plane(
        real_space(),
        [
            ("MemcpyH2D", 64 * 2**20, 5e-3),  # swap-ins: 64 MiB in 5 ms
            ("MemcpyH2D", 32 * 2**20, 2.5e-3),
            ("MemcpyD2H", 16 * 2**20, 2e-3),  # a swap-out
            ("MemcpyD2H", None, 1.0),  # no size recorded: no bandwidth from it
            ("volta_sgemm_128x64_nn", None, 3e-3),  # a kernel, not a copy
        ],
    )
    assert len(space.planes) > 1  # the real host planes are still there
    totals = copy_totals(space)
    assert set(totals) == {"in", "out"}
    copies, nbytes, seconds = totals["in"]
    assert (copies, nbytes) == (2, 96 * 2**20) and seconds == pytest.approx(7.5e-3)
    assert totals["out"][:2] == (1, 16 * 2**20) and totals["out"][2] == pytest.approx(2e-3)


def test_every_planned_swap_has_its_send_and_recv_in_the_partition_graphs(two_device):
    """The partitioner's pair on each swap's edge, found from the run metadata: a swap-out's
    pair is named after its producer (the edge's source), a swap-in's after its host Identity;
    both ends of every pair, one (transfer, direction) per name."""
    pairs, transfers = two_device["pairs"], two_device["transfers"]
    planned = two_device["planned"]
    directions = [t[0] for t in transfers.values()]
    assert (directions.count("out"), directions.count("in")) == (planned["out"], planned["in"])
    assert set(pairs) == set(transfers) and planned["out"] > 0 and planned["in"] > 0
    types = two_device["types"]
    for name, pair in pairs.items():
        assert pair["send"] and pair["recv"], pair
        assert pair["direction"] == transfers[name][0]
        source = pair["tensor_name"].split("_", 2)[2]  # "edge_<id>_<source>"
        assert pair["send"].startswith(f"{source}/_") and pair["recv"].startswith(f"{source}/_")
        if pair["direction"] == "in":
            assert source == name  # the gated host Identity
        else:
            assert source in types and not source.startswith("lms/")  # the producer
        assert two_device["names"][pair["send"]] == [name, pair["direction"]]
        assert two_device["names"][pair["recv"]] == [name, pair["direction"]]
    assert len(two_device["names"]) == 2 * len(pairs)


def _swap_copy_events(two_device, annotate):
    """Copy events of each swap as a GPU would record them, one after another: size its bytes,
    tf_op its pair's send or recv (`annotate`(index) picks), plus the input batch's copy and a
    kernel."""
    events = [
        ("MemcpyH2D", 6 * 2**20, 1e-4, "IteratorGetNext/_1:_Recv", 0.0),  # the batch: no swap
        ("volta_sgemm_128x64_nn", None, 1e-3, "functional_1/conv2d_1/convolution:Conv2D", None),
    ]
    for index, (name, pair) in enumerate(sorted(two_device["pairs"].items())):
        kind = {"out": "MemcpyD2H", "in": "MemcpyH2D"}[pair["direction"]]
        node = annotate(index, pair)
        events.append((kind, two_device["transfers"][name][1], 1e-5, f"{node}:_Op", None))
    return events


def test_copy_events_are_matched_to_swaps_by_their_send_or_recv_name(two_device):
    """Annotated with either node of the pair, each swap's copy counts for its swap and its
    direction; the input batch's copy counts apart; a kernel is no copy."""
    names = {name: tuple(found) for name, found in two_device["names"].items()}
    events = _swap_copy_events(two_device, lambda i, pair: pair["send" if i % 2 else "recv"])
    space = add_gpu_plane(real_space(), events)
    found = swap_copies(space, names)
    planned_bytes = {"out": 0, "in": 0}
    for direction, nbytes, _ in two_device["transfers"].values():
        planned_bytes[direction] += nbytes
    planned = two_device["planned"]
    for direction in ("out", "in"):
        copies, nbytes, seconds = found.swaps[direction]
        assert (copies, nbytes) == (planned[direction], planned_bytes[direction])
        assert seconds == pytest.approx(copies * 1e-5)
    assert found.others == {"in": (1, 6 * 2**20, pytest.approx(1e-4))}
    assert found.transfers == set(two_device["transfers"])
    every = copy_totals(space)  # every copy of the step, the batch's too
    assert every["in"][0] == planned["in"] + 1
    assert all(e.host_memory == "pinned" for e in copy_events(space))


def test_a_copy_no_swap_names_is_not_a_swap(two_device):
    """Copies annotated with other ops (a GPU step whose swaps Grappler removed: the consumer
    reads the producer's tensor, copied by a pair of other names), and a copy whose direction
    is not its swap's, match nothing: the traffic says so rather than count the plan."""
    names = {name: tuple(found) for name, found in two_device["names"].items()}
    events = _swap_copy_events(two_device, lambda i, pair: f"other/{i}/_1")
    found = swap_copies(add_gpu_plane(real_space(), events), names)
    assert found.swaps == {} and found.transfers == frozenset()
    assert found.others["in"][0] == two_device["planned"]["in"] + 1
    swap_in = next(p for p in two_device["pairs"].values() if p["direction"] == "in")
    backwards = [("MemcpyD2H", 4096, 1e-5, f"{swap_in['send']}:_Send", 0.0)]
    found = swap_copies(add_gpu_plane(real_space(), backwards), names)
    assert found.swaps == {} and found.others == {"out": (1, 4096, pytest.approx(1e-5))}
