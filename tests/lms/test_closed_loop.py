"""lms/closed_loop.py: the ladder's rungs, walked end to end by a real step whose measured
peaks are given.

The peaks come from `GivenPeaks`, not the allocator: which rung comes next depends only on
each plan's measured peak against the budget and the device memory, and a real allocator cannot
be made to land between the two on cue (its peaks vary by a few percent between processes).
Everything else is real: the plans, their rewrites, the steps they run."""

import logging

import pytest
from lms_cases import Case, small_cnn

import lms

pytestmark = pytest.mark.compat


class GivenPeaks:
    """A peak meter (lms.calibration.PeakMeter's interface) reporting the given peaks, one per
    measured step: `reset()` starts a measured step, `peak()` is its peak."""

    available = True

    def __init__(self, peaks):
        self.peaks, self.now, self.measured = list(peaks), 0, 0

    def reset(self):
        self.now = self.peaks.pop(0)
        self.measured += 1

    def peak(self):
        return self.now


def _planner(**options):
    case = Case(*small_cnn(64, 2, 3))
    planner = lms.LMS(device_memory="1GiB", calibration_steps=1, max_corrections=0, **options)
    device = planner.pipeline.device
    return case, planner, device.budget_bytes, device.limit_bytes


def _run_until_held(planner, case, meter, steps=8):
    planner.meter = meter  # (LMS.meter is made on first use: set before the first step)
    step = planner.wrap(case.step)
    for _ in range(steps):
        float(step(case.images, case.labels))
        if not step.calibrating:
            break
    return step


def test_an_earlier_plan_under_the_device_memory_is_planned_again_and_kept(caplog):
    """Rungs 2-4: the first plan measures over the budget but under the device memory; no
    correction is allowed, so the plan that swaps the most runs next, and measures over the
    device memory; the first plan is then planned again ("earlier"), measures as before, and is
    kept ("done"): over the budget's margin, under the device."""
    case, planner, budget, device = _planner()
    between, over = (budget + device) // 2, device + 1
    meter = GivenPeaks([between, over, between])
    with caplog.at_level(logging.WARNING, logger="lms"):
        step = _run_until_held(planner, case, meter)
    attempts = planner.report.calibration["attempts"]
    assert not step.calibrating and meter.measured == 3 and not meter.peaks
    assert [a["outcome"] for a in attempts] == ["over", "over", "kept"]
    assert attempts[0]["budget_bytes"] == attempts[2]["budget_bytes"]
    assert attempts[1]["simulated_peak_bytes"] <= attempts[0]["simulated_peak_bytes"]
    assert "measuring the plan that swaps the most" in caplog.text
    assert "planning again for" in caplog.text and "keeping it" in caplog.text
    assert planner.report.swapped_tensors == 0  # the first plan's: no swap needed in 1 GiB


def test_every_plan_over_the_device_memory_ends_the_ladder_with_nothing_fits():
    """No earlier plan measured under the device memory: the ladder ends in NothingFitsError,
    naming each attempt's measured peak."""
    case, planner, budget, device = _planner()
    meter = GivenPeaks([device + 1, device + 2])
    with pytest.raises(lms.NothingFitsError, match="no LMS plan kept the measured peak under"):
        _run_until_held(planner, case, meter)
    assert meter.measured == 2


def test_a_plan_that_swaps_the_most_the_host_cannot_hold_is_not_run(caplog):
    """Rung 3 when the host cannot hold the plan that swaps the most (the 3D U-Net 144³ split:
    15.0 GiB needed, 8.4 available; the run ended there): that plan is not run, and the ladder
    goes on: the first plan, over the budget but under the device memory, is kept."""
    import tensorflow as tf

    from lms.device.host_memory import OVERHEAD
    from lms.plan_request import Request
    from lms.tuning.tuner import floor_parameters

    case, planner, budget, device = _planner()
    args, needs = (case.images, case.labels), []
    for parameters in (None, floor_parameters(planner.options.parameters)):
        fresh = tf.function(case.step.python_function)
        simulation = planner.pipeline.plan(fresh, args, Request(parameters)).tuned.simulation
        needs.append((simulation.host_peak_bytes + simulation.peak_bytes) * OVERHEAD)
    if needs[0] >= needs[1]:  # Eigen's convolution temporaries: the first plan needs more
        pytest.skip("the plan that swaps the most needs no more host memory than the first")
    case, planner, budget, device = _planner(host_memory=int(sum(needs) / 2))
    meter = GivenPeaks([(budget + device) // 2])
    with caplog.at_level(logging.WARNING, logger="lms"):
        step = _run_until_held(planner, case, meter)
    attempts = planner.report.calibration["attempts"]
    assert not step.calibrating and meter.measured == 1
    assert [a["outcome"] for a in attempts] == ["kept"]
    assert "the plan that swaps the most was not run (host memory:" in caplog.text
