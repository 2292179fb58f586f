"""The link: its description, the emulated copy engines, the swap traffic LMS counts, and the
step-time model that replays a profiled step on another link (issue 14)."""

import pytest

import lms
from lms.link import EmulatedLink, Link, parse_bandwidth, parse_duration
from lms.profile import OpEvent, StepProfile
from lms.steptime import SwapGraph, project


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
    import time

    engines = EmulatedLink(Link(1e9, 0.3))
    engines.reserve("in", 0)  # the engine is busy for the next 0.3 s
    asked = time.perf_counter()
    work, took = engines.move("in", 0, work=lambda: "copied")
    waited = time.perf_counter() - asked
    assert work == "copied"
    assert 0.5 * 0.3 <= took <= 1.5 * 0.3
    assert waited - took >= 0.5 * 0.3  # the queue before it is not the transfer's time


def test_a_transfer_shorter_than_a_sleeps_lateness_still_takes_its_time():
    """20 us at 1 GB/s is less than `time.sleep` returns late by: the link still waits it out
    (a lower bound: a wait can be late, never early)."""
    engines = EmulatedLink(Link(1e9, 0.0))
    for _ in range(20):
        _, took = engines.move("out", 20_000)
        assert took >= 20e-6


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


@pytest.mark.gpu
def test_on_a_gpu_the_projection_on_the_measured_link_is_the_measured_step():
    """GPU only (skipped here): the step-time model against the real link. A step with
    everything swapped is profiled; its replay on the link measured by the host description
    (64 MiB copies) must be within 10 % of the measured step time; and the copy events give the
    swap traffic its seconds."""
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
    copies = measure_gpu_copies(0)
    at = SIZES.index(2**26)
    link = Link(min(copies["host_to_device_gbps"][at], copies["device_to_host_gbps"][at]) * 1e9)
    measured = statistics.median(times)
    projected = project(profile, swaps, link, measured).step_seconds
    assert abs(projected / measured - 1) < 0.10
    traffic = function.traffic()
    assert traffic.source == "plan" and traffic.copy == "GPU copy events"
    assert traffic.in_seconds_per_step > 0 and traffic.in_bandwidth > 0


@pytest.mark.compat  # lms's profile and emulated link on TensorFlow 2.14.1 too
def test_the_roofline_times_an_op_by_its_flops_or_its_bytes():
    import tensorflow as tf

    from lms.roofline import RooflineDevice, roofline_profile

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
