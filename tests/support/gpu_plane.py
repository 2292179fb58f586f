"""A GPU's device plane in this machine's own profile: an XSpace of one profiled step (host planes
only, no GPU here) to which a "/device:GPU:0" plane is added the way tsl's cupti_collector writes
one (tests/lms/observe/test_copy_events.py, tests/lms/values/test_link.py)."""

import tempfile

import tensorflow as tf

from lms.observe.xspace import _read_xspace


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


def add_gpu_plane(space, events, line_start_ns=10**9):
    """A "/device:GPU:0" plane as cupti_collector.cc writes it: each event's metadata named by
    its kind ("MemcpyH2D", "MemcpyD2H", or a kernel's name), a copy's size in its
    "memcpy_details" stat (a reference to a stat metadata holding "kind_src:... size:N ..."),
    and the TensorFlow op it ran for in "tf_op" ("name:type"). events: (kind, bytes or None,
    seconds), one after another, or (kind, bytes or None, seconds, tf_op, start seconds)."""
    plane = space.planes.add(id=len(space.planes), name="/device:GPU:0")
    stats, kinds = {}, {}

    def stat_id(name):
        if name not in stats:
            stats[name] = len(stats) + 1
            plane.stat_metadata[stats[name]].id = stats[name]
            plane.stat_metadata[stats[name]].name = name
        return stats[name]

    def kind_id(kind):
        if kind not in kinds:
            kinds[kind] = len(kinds) + 1
            plane.event_metadata[kinds[kind]].id = kinds[kind]
            plane.event_metadata[kinds[kind]].name = kind
        return kinds[kind]

    line = plane.lines.add(id=7, name="Stream #7(MemcpyH2D,MemcpyD2H)", timestamp_ns=line_start_ns)
    offset = 0
    for kind, size, seconds, *placed in events:
        tf_op, start = placed if placed else ("lms/s0/x:_Recv", None)
        if start is not None:
            offset = round(start * 1e12)
        event = line.events.add(
            metadata_id=kind_id(kind), offset_ps=offset, duration_ps=round(seconds * 1e12)
        )
        offset += event.duration_ps
        if kind in ("MemcpyH2D", "MemcpyD2H"):
            host = (
                "kind_src:pinned kind_dst:device"
                if kind == "MemcpyH2D"
                else ("kind_src:device kind_dst:pinned")
            )
            if size is not None:
                details = f"{host} size:{size} dest:0 async:1"
                event.stats.add(metadata_id=stat_id("memcpy_details"), ref_value=stat_id(details))
        event.stats.add(metadata_id=stat_id("tf_op"), ref_value=stat_id(tf_op))
    return space
