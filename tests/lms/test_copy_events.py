"""The GPU's copy events as the swap traffic's bandwidth (lms/copy_events.py). No GPU here: the
closest real thing is this machine's own profile (its XSpace, from TensorFlow's profiler), to
which a device plane is added the way tsl's cupti_collector writes one on a GPU."""

import tempfile

import pytest
import tensorflow as tf

from lms.copy_events import copy_totals, profile_copies
from lms.profile import _read_xspace


@tf.function
def step(x):
    return tf.reduce_sum(tf.nn.relu(tf.matmul(x, x)))


X = tf.ones((64, 64))


def real_space():
    """This machine's XSpace of one profiled step: host planes only."""
    step(X)
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            step(X)
        finally:
            tf.profiler.experimental.stop()
        return _read_xspace(logdir)


def add_gpu_plane(space, events):
    """A "/device:GPU:0" plane as cupti_collector.cc writes it: each event's metadata named by
    its kind ("MemcpyH2D", "MemcpyD2H", or a kernel's name), a copy's size in its
    "memcpy_details" stat (a reference to a stat metadata holding "kind_src:... size:N ..."),
    and the TensorFlow op it ran for in "tf_op". events: (kind, bytes or None, seconds)."""
    plane = space.planes.add(id=len(space.planes), name="/device:GPU:0")
    stats = {}

    def stat_id(name):
        if name not in stats:
            stats[name] = len(stats) + 1
            plane.stat_metadata[stats[name]].id = stats[name]
            plane.stat_metadata[stats[name]].name = name
        return stats[name]

    line = plane.lines.add(id=7, name="Stream #7(MemcpyH2D,MemcpyD2H)", timestamp_ns=10**9)
    offset = 0
    for number, (kind, size, seconds) in enumerate(events, start=1):
        plane.event_metadata[number].id = number
        plane.event_metadata[number].name = kind
        event = line.events.add(
            metadata_id=number, offset_ps=offset, duration_ps=round(seconds * 1e12)
        )
        offset += event.duration_ps
        if size is not None:
            details = f"kind_src:pinned kind_dst:device size:{size} dest:0 async:1"
            event.stats.add(metadata_id=stat_id("memcpy_details"), ref_value=stat_id(details))
        event.stats.add(metadata_id=stat_id("tf_op"), ref_value=stat_id("lms/s0/x:_Recv"))
    return space


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
