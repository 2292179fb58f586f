"""lms/memory/explain.py: the peak explained part by part, with a reason per buffer.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_equivalence import mixed_block_case

import lms

pytestmark = pytest.mark.compat


PEAK_REASONS = (
    "written by the running op",
    "read by the running op",
    "swapped out, but still read",
    "a step output",
    "unswappable: ",
    "LMS not used",
    "too close: last reader ",
    "no op runs between",
    "not swapped by this plan",
    "swapped back in for ",
)


def test_the_peak_is_explained_part_by_part_with_a_reason_per_buffer():
    """On a model outside the suite: the explanation's parts add up to the simulated peak, and
    every buffer held there says why it is on the device."""
    case = mixed_block_case(resolution=48)
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    for parameters in (None, lms.Parameters(1, 1, 0), lms.Parameters(6, 2, 1)):
        plan = lms.internal.plan(analysis, parameters) if parameters else None
        simulation = lms.internal.simulate(analysis, plan)
        explained = lms.internal.explain_peak(analysis, simulation, plan, top=1000)
        parts = ("resident_bytes", "buffer_bytes", "kernel_temporary_bytes")
        parts += ("next_op_in_flight_bytes",)
        assert sum(explained[p] for p in parts) == simulation.peak_bytes
        buffers = explained["largest_buffers"]
        assert buffers and explained["other_buffers"]["count"] == 0
        assert sum(b["bytes"] for b in buffers) == explained["buffer_bytes"]
        assert [b["bytes"] for b in buffers] == sorted((b["bytes"] for b in buffers), reverse=True)
        for entry in buffers:
            assert entry["why_on_device"].startswith(PEAK_REASONS), entry
        running = explained["running_op"]
        assert running == simulation.peak_op
        written = [b for b in buffers if b["why_on_device"] == "written by the running op"]
        assert all(b["tensor"].startswith(running + ":") for b in written)
        if plan is None:
            assert not any(b["op_type"] == "swap-in" for b in buffers)
        else:
            assert not any(b["why_on_device"].startswith("LMS not used") for b in buffers)
    top = lms.internal.explain_peak(analysis, simulation, plan, top=3)
    assert len(top["largest_buffers"]) == 3 and top["other_buffers"]["count"] == len(buffers) - 3
