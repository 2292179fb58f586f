"""While loops in the step (lms/graph/loops.py): what a recurrent step keeps for its gradient is
seen, counted, and said to be out of LMS's reach."""

import logging

import pytest
from _lstm_step import lstm_step
from lms_cases import run_child

import lms

MiB = 2**20


def forward_lists(length: int, batch: int) -> list:
    """The bytes each forward loop's lists hold, in the order the model runs them."""
    step, x, y = lstm_step(length, batch, width=64)
    loops = lms.internal.analyze(step.get_concrete_function(x, y).graph).loops
    forward = sorted((n, b) for n, b in loops if not n.startswith("gradient_tape"))
    assert len(forward) == 2 and all(name.endswith("/while") for name, _ in forward), loops
    return [size for _, size in forward]


def test_the_analysis_sizes_what_a_loop_keeps_for_its_gradient():
    """The forward loops' tensor lists grow with the sequence and the batch, exactly (one
    element per iteration, nearly all as large as the batch); without them the lists were
    variants of 0 bytes and a plan at 0.6x the plain peak measured the plain peak."""
    short, long, wide = forward_lists(16, 2), forward_lists(32, 2), forward_lists(16, 4)
    for k, size in enumerate(short):
        assert long[k] == 2 * size
        assert abs(wide[k] - 2 * size) < 0.01 * size  # (a few int32 scalars per iteration)
        # per iteration: the activations the gradient reads (8 pushes of batch x width floats and
        # smaller ones), not the weights read in the body (shared with the variable)
        assert 8 * 2 * 64 * 4 <= size / 16 < 64 * 4 * 64 * 4


def test_lms_says_it_cannot_plan_into_a_loop(caplog):
    step, x, y = lstm_step(16, 2, width=64)
    planner = lms.LMS(device_memory="1TiB")
    with caplog.at_level(logging.WARNING, logger="lms"):
        planned = planner.wrap(step)
        float(planned(x, y))
    warnings = [r.getMessage() for r in caplog.records if "cannot plan into" in r.getMessage()]
    assert len(warnings) == 1 and "While loop" in warnings[0] and "/while'" in warnings[0]
    loops = planner.report.analysis.loops
    assert loops and loops[0].bytes > 0


def usual_order(length: int) -> dict:
    """The step measured in three fresh processes with Eigen's kernels, the least peak kept.
    TensorFlow's executor takes another order in about one process in ten (28 processes here:
    1.15-1.33x the simulated peak; CI saw 1.61x once): an order the simulator does not model and
    the closed loop answers for. Three processes all in it: about one in a thousand."""
    results = [
        run_child("_lstm_step.py", str(length), "8", extra_env={"TF_ENABLE_ONEDNN_OPTS": "0"})[1]
        for _ in range(3)
    ]
    return min(results, key=lambda result: result["measured"])


@pytest.mark.kernels
def test_a_recurrent_steps_simulated_peak_is_its_measured_one():
    """Two stacked LSTMs of width 256 over 64 and 256 tokens, batch 8, with Eigen's kernels:
    simulated 21.6 and 44.1 MiB, measured 20.8-22.2 and 48.0-49.9 MiB in the usual order; the
    measured peak grows about 1.2x what the simulation adds (2 of the 10 pushes per iteration it
    counts as shared with another list element are, measured, not). Before the lists were
    counted the simulated growth was a fraction of this. With oneDNN's kernels the measured
    peak of this step is bimodal between processes (31-32 or 76-91 MiB, the same plain step):
    TensorFlow's own order, which the closed loop answers for, not the analysis; the growth with
    the sequence is checked there."""
    short, long = usual_order(64), usual_order(256)
    for result in (short, long):
        assert 0.85 <= result["measured"] / result["simulated"] <= 1.2, result
    grown = (long["measured"] - short["measured"]) / (long["simulated"] - short["simulated"])
    assert 0.8 <= grown <= 1.5, (short, long)
