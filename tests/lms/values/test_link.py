"""The link: its description, the emulated copy engines, the swap traffic LMS counts, and the
step-time model that replays a profiled step on another link (issue 14)."""

import time
import weakref

import numpy as np
import pytest
from lms_cases import run_child

import lms
from lms.timing.profile import OpEvent, StepProfile, step_profile
from lms.timing.steptime import SwapGraph, project, seen_transfers
from lms.values.link import EmulatedLink, Link, parse_bandwidth, parse_duration


def test_bandwidths_and_latencies_parse_with_their_units():
    assert parse_bandwidth("16GB/s") == 16e9
    assert parse_bandwidth("12.5 GiB/s") == 12.5 * 2**30
    assert parse_bandwidth(900e6) == 900e6
    assert parse_duration("10us") == pytest.approx(10e-6)
    assert parse_duration("1.5ms") == pytest.approx(1.5e-3)
    assert parse_duration(0) == 0.0
    link = Link.of({"bandwidth": "75GB/s", "latency": "2us"})
    assert link.seconds(75 * 10**9) == pytest.approx(1 + 2e-6)


@pytest.mark.parametrize(
    "value, message",
    [
        ({"bandwidth": "16GB"}, "link.bandwidth must be a bandwidth like '16GB/s'"),
        ({"bandwidth": "-1GB/s"}, "link.bandwidth must be a bandwidth"),
        ({"bandwidth": "16GB/s", "latency": "10"}, "link.latency must be a duration"),
        ({"bandwidth": "16GB/s", "latency": "-1us"}, "link.latency must be a duration"),
        ({"latency": "1us"}, "link needs a bandwidth"),
        ({"bandwidth": "1GB/s", "speed": 2}, "unknown key(s) ['speed']"),
        ("16GB/s", "link must be a table"),
    ],
)
def test_a_bad_link_gets_one_error_naming_the_key(value, message):
    with pytest.raises(lms.ParameterError) as error:
        lms.check_options("1GiB", link=value)
    assert message in str(error.value)


def test_a_link_is_refused_where_a_gpu_copies():
    with pytest.raises(lms.ParameterError, match="emulated device"):
        lms.check_options("1GiB", mechanism="device-copy", link={"bandwidth": "1GB/s"})


def test_the_emulated_link_moves_one_transfer_at_a_time_per_direction():
    engines = EmulatedLink(Link(1e9, 0.5))  # 1 GB/s, half a second per transfer: no waiting here
    _, first = engines.reserve("out", 10**9)
    begins, second = engines.reserve("out", 2 * 10**9)
    assert begins == first  # queued behind the first
    assert second - first == pytest.approx(0.5 + 2.0)
    _, other = engines.reserve("in", 10**9)
    assert other < second and other == pytest.approx(first, abs=0.1)  # its own engine


def test_a_transfer_is_timed_from_when_its_engine_begins_it_not_from_the_request():
    """The seconds a transfer took leave out its wait behind the one before it: it is booked
    0.3 s on an engine busy for 0.3 s more, so the call returns after ~0.6 s and the transfer
    took ~0.3 s (loose bounds: this measures sleeps)."""
    engines = EmulatedLink(Link(1e9, 0.3))
    engines.reserve("in", 0)  # the engine is busy for the next 0.3 s
    asked = time.perf_counter()
    took = engines.receive(0)
    waited = time.perf_counter() - asked
    assert 0.5 * 0.3 <= took <= 1.5 * 0.3
    assert waited - took >= 0.5 * 0.3  # the queue before it is not the transfer's time


def test_a_transfer_shorter_than_a_sleeps_lateness_still_takes_its_time():
    """20 us at 1 GB/s is less than `time.sleep` returns late by: the link still waits it out
    (a lower bound: a wait can be late, never early)."""
    engines = EmulatedLink(Link(1e9, 0.0))
    for _ in range(20):
        assert engines.receive(20_000) >= 20e-6


def test_a_swap_out_goes_on_and_keeps_its_tensor_until_its_transfer_is_done():
    """As on a GPU, a swap-out's op returns once its host copy is done and its transfer booked
    (the compute stream goes on), and the swapped tensor's buffer (`reads`) lives until the
    copy engine is done with it. Its seconds are the transfer's (0.3 s), not the op's."""
    engines = EmulatedLink(Link(1e9, 0.3))
    tensor = np.ones(4)
    kept = weakref.ref(tensor)
    asked = time.perf_counter()
    copied, done, took = engines.send(tensor.nbytes, work=tensor.copy, reads=tensor)
    assert time.perf_counter() - asked < 0.1 and done >= asked + 0.3
    assert took == pytest.approx(0.3, abs=0.05)
    np.testing.assert_array_equal(copied, 1.0)
    del tensor
    assert kept() is not None  # the transfer is still reading it
    time.sleep(max(0.0, done - time.perf_counter()) + 0.2)
    assert kept() is None


def test_a_swap_in_begins_once_its_swap_out_is_done_and_waits_for_its_own_transfer():
    """The host store on a link: the swap-out returns at once, the swap-in of its handle waits
    for that transfer (0.3 s) and then for its own (0.3 s); each direction's seconds are its
    transfer's own, not the wait for the other's."""
    from lms.device.host_store import HostStore

    store = HostStore(Link(1e9, 0.3))
    asked = time.perf_counter()
    handle = store._put(np.ones((8, 8), np.float32), 1)
    returned = time.perf_counter() - asked
    back = store._get(handle)
    arrived = time.perf_counter() - asked
    np.testing.assert_array_equal(back, 1.0)
    assert returned < 0.1 and arrived >= 0.6
    traffic = store.take_traffic()
    assert traffic.out_transfer_seconds == pytest.approx(0.3, abs=0.05)
    assert 0.3 <= traffic.in_transfer_seconds <= 0.45


def _profile(*events):
    return StepProfile(tuple(OpEvent(n, t, s, d) for n, t, s, d in events), ())


# A step of four ops: the swap-out after `a`, its swap-in triggered after `b`, read by `copy`
STEP = _profile(
    ("a", "Conv2D", 0.0, 1.0),
    ("lms/s0/lms_swapout", "PyFunc", 1.0, 0.1),
    ("b", "Conv2D", 1.0, 2.0),
    ("lms/s0/g0/lms_swapin", "PyFunc", 3.0, 0.05),
    ("lms/s0/g0/lms_swapin_copy", "DeepCopy", 3.05, 0.05),
    ("c", "Conv2D", 3.1, 1.0),
)
SWAPS = SwapGraph(
    {
        "lms/s0/lms_swapout": ("out", 10**9, None),
        "lms/s0/g0/lms_swapin": ("in", 10**9, "lms/s0/lms_swapout"),
    },
    {"lms/s0/g0/lms_swapin_copy": ("lms/s0/g0/lms_swapin",)},
)


def test_without_a_link_the_projection_is_the_profiled_step():
    assert project(STEP, SWAPS, None).step_seconds == pytest.approx(4.1)
    assert project(STEP, SWAPS, None, step_seconds=8.2).step_seconds == pytest.approx(8.2)


def test_a_slow_link_delays_the_reader_of_a_swap_in_and_everything_after_it():
    # 1 GB at 1 GB/s: the swap-out is done at 2.0, the swap-in asked at 3.0 arrives at 4.0;
    # the copy then starts at 4.0 instead of 3.05, and c ends 0.95 s later than profiled
    slow = project(STEP, SWAPS, Link(1e9))
    assert slow.step_seconds == pytest.approx(4.1 + 0.95)
    assert slow.compute_seconds == pytest.approx(4.1)
    assert (slow.busy_out, slow.busy_in, slow.waits) == (pytest.approx(1.0), pytest.approx(1.0), 1)
    # 1 GB at 0.25 GB/s: the swap-in waits for its swap-out (done at 5.0), then moves 4 s
    slower = project(STEP, SWAPS, Link(0.25e9))
    assert slower.step_seconds == pytest.approx(9.0 + 0.05 + 1.0)
    # a fast link hides behind compute; a device 10x faster exposes it again
    assert project(STEP, SWAPS, Link(100e9)).step_seconds == pytest.approx(4.1)
    fast_device = project(STEP, SWAPS, Link(10e9), compute_scale=0.1)
    assert fast_device.compute_seconds == pytest.approx(0.41)
    # swap-in asked at 0.3 arrives at 0.4 (0.1 s of transfer): the copy waits 0.095 s, c too
    assert fast_device.step_seconds == pytest.approx(0.41 + 0.095)


def test_a_swap_in_queues_behind_another_on_its_direction():
    two_in = _profile(
        ("lms/s0/lms_swapout", "PyFunc", 0.0, 0.0),
        ("lms/s1/lms_swapout", "PyFunc", 0.0, 0.0),
        ("x", "Conv2D", 0.0, 3.0),
        ("lms/s0/g0/lms_swapin", "PyFunc", 3.0, 0.0),
        ("lms/s1/g0/lms_swapin", "PyFunc", 3.0, 0.0),
        ("y", "Conv2D", 3.0, 1.0),
    )
    swaps = SwapGraph(
        {
            "lms/s0/lms_swapout": ("out", 10**9, None),
            "lms/s1/lms_swapout": ("out", 10**9, None),
            "lms/s0/g0/lms_swapin": ("in", 10**9, "lms/s0/lms_swapout"),
            "lms/s1/g0/lms_swapin": ("in", 10**9, "lms/s1/lms_swapout"),
        },
        {"y": ("lms/s0/g0/lms_swapin", "lms/s1/g0/lms_swapin")},
    )
    # both swap-outs share the device-to-host direction (done at 1 and 2); the swap-ins share
    # the other one (done at 4 and 5): y starts at 5
    assert project(two_in, swaps, Link(1e9)).step_seconds == pytest.approx(6.0)


def conv_step(resolution, batch, channels, layers):
    """A training step of a plain CNN and one batch: (step, images, labels)."""
    import keras
    import tensorflow as tf

    from suite.workloads import training
    from suite.workloads.losses import classification

    keras.utils.set_random_seed(0)
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch)
    x = inputs
    for _ in range(layers):
        x = keras.layers.Conv2D(channels, 3, padding="same", activation="relu")(x)
    model = keras.Model(inputs, keras.layers.Dense(10)(keras.layers.GlobalAveragePooling2D()(x)))
    step = training.make_train_step(model, classification, keras.optimizers.SGD(0.01), "fp32")
    images = tf.random.stateless_uniform((batch, resolution, resolution, 3), seed=(1, 2))
    labels = tf.random.stateless_uniform((batch,), (3, 4), maxval=10, dtype=tf.int32)
    return step, images, labels


@pytest.fixture(scope="module")
def swapped_step():
    """A small CNN with everything swapped, planned once: (function, planner, images, labels)."""
    step, images, labels = conv_step(48, 2, 8, 4)
    planner = lms.LMS(
        device_memory="1TiB",
        swapout_threshold=1,
        swapin_ahead=1,
        swapin_groupby=0,
        link={"bandwidth": "0.1GB/s", "latency": "100us"},
    )
    function = planner.wrap(step)
    function(images, labels)
    return function, planner, images, labels


@pytest.mark.compat  # lms's profile and emulated link on TensorFlow 2.14.1 too
def test_lms_counts_the_swap_traffic_of_each_step(swapped_step):
    function, planner, images, labels = swapped_step
    function.reset_traffic()
    assert function.traffic() is None  # no step since the reset
    for _ in range(3):
        function(images, labels)
    traffic = function.traffic()
    report = planner.report
    assert traffic.version == 2 and traffic.source == "host-store"
    assert traffic.steps == 3 and traffic.copy == "emulated link"
    assert traffic.swap_outs_per_step == report.swapped_tensors > 0
    assert traffic.swap_ins_per_step == report.swap_ins
    assert traffic.out_bytes_per_step == report.swapped_bytes
    assert traffic.in_bytes_per_step == report.swapped_in_bytes
    # the seconds are the link's transfers' own (latency + bytes / bandwidth each, by the
    # clock): the bandwidth they imply is near the link's 0.1 GB/s (loosely: these are sleeps,
    # and 100 us per transfer of ~150 KB costs ~6 %)
    for direction in ("out", "in"):
        assert 0.3 * 0.1e9 <= getattr(traffic, f"{direction}_bandwidth") <= 1.5 * 0.1e9
        bytes_per_step = getattr(traffic, f"{direction}_bytes_per_step")
        assert getattr(traffic, f"{direction}_bandwidth") == pytest.approx(
            bytes_per_step / getattr(traffic, f"{direction}_seconds_per_step")
        )
    assert traffic.link == {"bandwidth": 0.1e9, "latency": pytest.approx(100e-6)}


def test_without_a_link_no_copy_is_timed_and_no_bandwidth_reported():
    """The emulated device without a link keeps the swapped tensor in the host store: nothing
    crosses a link, so the traffic has counts and bytes but no seconds and no bandwidth (the
    time in the swap op was a dictionary lookup, not a copy)."""
    step, images, labels = conv_step(32, 2, 8, 3)
    planner = lms.LMS(device_memory="1TiB", swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)
    function = planner.wrap(step)
    function(images, labels)
    function.reset_traffic()
    for _ in range(2):
        function(images, labels)
    traffic = function.traffic()
    assert traffic.copy == "none" and traffic.link is None
    assert traffic.in_bytes_per_step == planner.report.swapped_in_bytes > 0
    assert traffic.swap_ins_per_step == planner.report.swap_ins
    for direction in ("out", "in"):
        assert getattr(traffic, f"{direction}_seconds_per_step") is None
        assert getattr(traffic, f"{direction}_bandwidth") is None


@pytest.mark.compat  # lms's profile and emulated link on TensorFlow 2.14.1 too
def test_a_profiled_step_names_every_swap_and_replays_to_its_own_time(swapped_step):
    function, planner, images, labels = swapped_step
    profile, swaps = function.profile(images, labels)
    report = planner.report
    kinds = [direction for direction, _, _ in swaps.transfers.values()]
    assert kinds.count("out") == report.swapped_tensors
    assert kinds.count("in") == report.swap_ins
    assert swaps.bytes_per_direction == {
        "out": report.swapped_bytes,
        "in": report.swapped_in_bytes,
    }
    profiled = {event.name for event in profile.ops}
    assert set(swaps.transfers) <= profiled  # every swap op ran and was seen
    copies = [name for name in swaps.gates if name.endswith("lms_swapin_copy")]
    assert len(copies) == report.swap_ins
    # the replay without a link is the profiled step; a slower link only adds time
    assert project(profile, swaps, None, 0.5).step_seconds == pytest.approx(0.5)
    times = [project(profile, swaps, Link(b), 0.5).step_seconds for b in (1e11, 1e9, 1e7)]
    assert 0.5 - 1e-9 <= times[0] <= times[1] <= times[2]
    assert times[2] >= report.swapped_in_bytes / 1e7  # at 10 MB/s the link dominates


@pytest.fixture(scope="module")
def two_device():
    """A small conv step with everything swapped, run on two logical CPU devices in a fresh
    process (tests/support/_two_device_copies.py): its swap graph, its swaps' send/recv pairs
    and its profile with those pairs named by their swaps (`LMSFunction.profile`)."""
    found = run_child("_two_device_copies.py", "swaps")[1]
    found["profile"] = StepProfile(tuple(OpEvent(*e) for e in found["events"]), ())
    transfers = {name: tuple(t) for name, t in found["transfers"].items()}
    found["swaps"] = SwapGraph(transfers, {n: tuple(g) for n, g in found["gates"].items()})
    found["names"] = {name: tuple(t) for name, t in found["names"].items()}
    return found


def _slow_link(swaps: SwapGraph, seconds: float) -> Link:
    """A link on which the swap-ins alone take `seconds` one after another: a step replayed on
    it lasts at least that long, and a reader of the last swap-in to arrive waits, if nothing
    waited before it, however long the profiled ops took (no timing in the test)."""
    return Link(swaps.bytes_per_direction["in"] / seconds)


def test_with_device_copies_the_readers_of_a_swap_in_wait_for_its_transfer(two_device):
    """The device-copy layout: a swap-in's host Identity is the transfer; its readers read the
    device Identity after it (`lms_swapin_copy`), which leaves no event in a profile, so they
    are gated by the transfer itself."""
    swaps = two_device["swaps"]
    ins = [name for name, (direction, _, _) in swaps.transfers.items() if direction == "in"]
    assert len(ins) == two_device["planned"]["in"] > 0
    for name in ins:
        assert swaps.gates[f"{name}_copy"] == (name,)
        readers = [op for op, gates in swaps.gates.items() if name in gates]
        assert any(not op.startswith("lms/") for op in readers), name


def test_on_two_devices_the_profile_sees_every_swap_and_a_slow_link_delays_the_step(two_device):
    """`LMSFunction.profile` on two logical CPU devices: the swap ops run inline without an
    event, the pairs' `_Send`s have one; named by their swaps, every transfer is in the profile,
    and on a slow link the replay waits for them."""
    profile, swaps = two_device["profile"], two_device["swaps"]
    assert two_device["seen"] == seen_transfers(profile, swaps) == sorted(swaps.transfers)
    makespan = profile.makespan
    slow = project(profile, swaps, _slow_link(swaps, 10 * makespan), makespan)
    assert slow.step_seconds >= 10 * makespan and slow.waits >= 1
    assert two_device["projected_10MBps"] >= swaps.bytes_per_direction["in"] / 10e6
    traffic = two_device["traffic"]  # no copy events between two CPU devices: the plan's
    assert (traffic["source"], traffic["copy"]) == ("plan", "two devices")
    assert traffic["swap_ins_per_step"] == traffic["planned_swap_ins_per_step"] > 0


def _device_plane_of(two_device, annotate):
    """The two-device step's profile written as a GPU's device plane: each op a kernel named by
    its `tf_op`, each transfer a copy of its bytes annotated with a node of its pair
    (`annotate`: "send" or "recv")."""
    from gpu_plane import add_gpu_plane, real_space

    pairs, events = two_device["pairs"], []
    for event in two_device["profile"].ops:
        if event.name in pairs:
            pair = pairs[event.name]
            kind = {"out": "MemcpyD2H", "in": "MemcpyH2D"}[pair["direction"]]
            nbytes = two_device["swaps"].transfers[event.name][1]
            tf_op = f"{pair[annotate]}:{'_Send' if annotate == 'send' else '_Recv'}"
            events.append((kind, nbytes, event.duration, tf_op, event.start))
        else:
            tf_op = f"{event.name}:{event.type}"
            events.append(("kernel", None, event.duration, tf_op, event.start))
    return add_gpu_plane(real_space(), events)


@pytest.mark.parametrize("annotate", ["send", "recv"])
def test_on_a_gpu_plane_the_copies_named_by_their_pair_are_the_transfers(two_device, annotate):
    """A GPU's profile (its device plane, as the collector writes it; the copy's `tf_op` the
    send or the recv of the pair): with the pairs' names every swap is a transfer of the replay
    and a slow link delays the step; without them no copy is a swap, and the replay is the
    profiled step whatever the link (what made the GPU test pass by construction)."""
    space = _device_plane_of(two_device, annotate)
    swaps = two_device["swaps"]
    profile = step_profile(space, two_device["names"])
    assert seen_transfers(profile, swaps) == sorted(swaps.transfers)
    assert len(profile.copies) == len(swaps.transfers)
    makespan = profile.makespan
    link = _slow_link(swaps, 10 * makespan)
    slow = project(profile, swaps, link, makespan)
    assert slow.step_seconds >= 10 * makespan and slow.waits >= 1
    blind = step_profile(space)
    assert seen_transfers(blind, swaps) == []
    assert project(blind, swaps, link, makespan).step_seconds == pytest.approx(makespan)


@pytest.mark.gpu
def test_on_a_gpu_the_projection_on_the_measured_link_is_the_measured_step():
    """GPU only (skipped here): the step-time model against the real link. A step with
    everything swapped is profiled; its copies are matched to its swaps by their send/recv names
    (none matched fails the test: the replay would then be the measured step by construction);
    on a 10 MB/s link the replay lasts far longer than the measured step; on the link measured
    by the host description (64 MiB copies, pinned) it is within 10 % of the measured step; and
    the traffic is the matched copies' (the plan's beside it)."""
    import statistics
    import time

    from suite.hosts.link import SIZES, measure_gpu_copies

    step, images, labels = conv_step(224, 8, 64, 6)
    function = lms.LMS(swapout_threshold=1, swapin_ahead=1, swapin_groupby=0).wrap(step)
    for _ in range(3):
        function(images, labels)
    times = []
    for _ in range(10):
        started = time.perf_counter()
        function(images, labels).numpy()
        times.append(time.perf_counter() - started)
    profile, swaps = function.profile(images, labels)
    measured = statistics.median(times)
    seen = seen_transfers(profile, swaps)
    assert len(seen) > 0, "no copy event matched a swap"
    assert len(seen) == len(swaps.transfers), sorted(set(swaps.transfers) - set(seen))
    moved_in = swaps.bytes_per_direction["in"]
    slow = project(profile, swaps, Link(10e6), measured)
    assert slow.step_seconds >= max(10 * measured, moved_in / 10e6) and slow.waits > 0
    copies = measure_gpu_copies(0)
    assert copies["timed_by"] == "copy events" and copies["pinned"] is True
    at = SIZES.index(2**26)
    link = Link(min(copies["host_to_device_gbps"][at], copies["device_to_host_gbps"][at]) * 1e9)
    projected = project(profile, swaps, link, measured).step_seconds
    assert abs(projected / measured - 1) < 0.10
    traffic = function.traffic()
    assert traffic.source == "copy events" and traffic.copy == "GPU copy events"
    assert traffic.swap_ins_per_step == traffic.planned_swap_ins_per_step > 0
    assert traffic.swap_outs_per_step == traffic.planned_swap_outs_per_step > 0
    assert traffic.in_bytes_per_step == traffic.planned_in_bytes_per_step
    assert traffic.out_bytes_per_step == traffic.planned_out_bytes_per_step
    assert traffic.in_seconds_per_step > 0 and traffic.in_bandwidth > 0


@pytest.mark.compat  # lms's profile and emulated link on TensorFlow 2.14.1 too
def test_the_roofline_times_an_op_by_its_flops_or_its_bytes():
    import tensorflow as tf

    from lms.timing.roofline import RooflineDevice, roofline_profile

    device = RooflineDevice("test", {"float32": 1e12}, 1e11, launch=1e-6)

    @tf.function
    def step(a, b):
        return tf.nn.relu(tf.matmul(a, b))

    graph = step.get_concrete_function(
        tf.TensorSpec([1024, 1024]), tf.TensorSpec([1024, 1024])
    ).graph
    times = {e.type: e.duration for e in roofline_profile(graph, device).ops}
    # 2 * 1024^3 FLOPs at 1 TFLOP/s (its 12 MiB at 100 GB/s take less); ReLU moves 8 MiB
    assert times["MatMul"] == pytest.approx(1e-6 + 2 * 1024**3 / 1e12)
    assert times["Relu"] == pytest.approx(1e-6 + 2 * 4 * 1024**2 / 1e11)
    assert times["Placeholder"] == 0.0


def test_a_bandwidth_without_its_unit_is_refused_with_a_hint():
    from lms.errors import ParameterError

    with pytest.raises(ParameterError, match=r"link.bandwidth 16 has no unit .* write e.g. 16GB/s"):
        Link.of({"bandwidth": 16}, "link")
    with pytest.raises(ParameterError, match="must be a bandwidth like '16GB/s'"):
        Link.of({"bandwidth": "16"}, "link")
    assert Link.of({"bandwidth": 16e9}).bandwidth == Link.of({"bandwidth": "16GB/s"}).bandwidth
