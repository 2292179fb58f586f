"""`inv plan` beside recorded trials (suite.running.planning)."""

import pytest
from trial_cases import tiny_spec

from suite.records import load_trials
from suite.running.runner import run_spec
from suite.running.trial import run_trial

pytestmark = pytest.mark.slow


def test_inv_plan_shows_what_the_loop_measured_for_a_recorded_trial(tmp_path):
    """`inv plan` beside a results directory: a trial that ran with LMS shows its closed loop's
    attempts (budget planned for, simulated and measured peak) as `measured`, next to the plan
    simulated now; a trial that never ran shows none."""
    from suite.running.planning import plan_spec

    plain = run_trial(tiny_spec("[128]").trials[0].params, 600, tmp_path / "plain.log")
    assert plain.outcome == "ok", plain.error
    budget = int(plain.metrics.peak_memory_bytes * 0.85)
    defaults = f"memory_budget = {budget}\nlms = true"
    results = tmp_path / "results"
    run_spec(tiny_spec("[128]", defaults), results, host="h", echo=lambda line: None)
    (record,) = load_trials(results, "h")
    assert record.outcome == "ok", record.error
    calibration = record.metrics.lms_plan.calibration
    assert calibration["attempts"][-1]["measured_peak_bytes"] > 0
    both = tiny_spec("[128, 112]", defaults)
    reports = {r["resolution"]: r for r in plan_spec(both, tmp_path / "p", results_dir=results)}
    assert reports[128]["measured"] == calibration
    assert "measured" not in reports[112]
