"""The profiler's record of a step, read: one call run under `tf.profiler.experimental` and the
XSpace it writes (`profiled_space`), and a host plane's op events (`op_events`). Both the
placement check (when a gated copy started) and the step-time model's profile (per-op times)
read what ran from here. The XSpace proto ships with TensorFlow (`tsl.profiler.protobuf.
xplane_pb2`; lms/_tf_private.py finds it)."""

import glob
import os
import tempfile

import tensorflow as tf

from lms import _tf_private


def op_events(plane):
    """The executor's op events of a host plane ("name:Type"), absolute start in picoseconds;
    its bookkeeping ("Class::Method") is skipped."""
    metadata = plane.event_metadata
    events = []
    for line in plane.lines:
        base = line.timestamp_ns * 1000
        for event in line.events:
            name = metadata[event.metadata_id].name
            if ":" in name and "::" not in name:
                name, _, kind = name.rpartition(":")
                events.append((base + event.offset_ps, event.duration_ps, name, kind))
    return events


def _read_xspace(logdir: str):
    paths = sorted(glob.glob(os.path.join(logdir, "**", "*.xplane.pb"), recursive=True))
    if not paths:
        raise RuntimeError(f"the profiler wrote no XSpace under {logdir}")
    space = _tf_private.xplane_pb2().XSpace()
    with open(paths[-1], "rb") as handle:
        space.ParseFromString(handle.read())
    return space


def profiled_space(callable_, *args):
    """Run `callable_(*args)` once under the profiler; the XSpace it wrote (read by
    lms/timing/profile.py `step_profile`, and on a GPU by `lms.observe.copy_events.copy_totals`)."""
    with tempfile.TemporaryDirectory(prefix="lms-profile-") as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            callable_(*args)
        finally:
            tf.profiler.experimental.stop()
        return _read_xspace(logdir)
