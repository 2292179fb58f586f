"""`inv plan` (suite.running.planning): plans beside recorded trials, and the host memory a plan
is checked against: the planned host's, never this machine's when the plan is for another."""

import logging

import pytest
from trial_cases import tiny_spec

from suite.lms_seam import HOST_NOT_CHECKED
from suite.records import load_trials
from suite.running.runner import run_spec
from suite.running.trial import run_trial


@pytest.mark.slow
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
    plans = plan_spec(both, tmp_path / "p", results_dir=results)
    measured = {p.trial.params.resolution: p.measured for p in plans}
    assert measured == {128: calibration, 112: None}
    assert "measured" not in plans[1].to_dict() and plans[0].to_dict()["measured"] == calibration


# GoogLeNet 64² b1 with everything swapped: a plan that holds a few MiB on the host
SWAPPED = "lms = { swapout_threshold = 1, swapin_ahead = 1, swapin_groupby = 0, sync_mode = 0 }"


def test_a_plan_for_another_hosts_gpu_is_checked_against_that_hosts_memory_only(
    tmp_path, capsys, caplog
):
    """`inv plan --device-memory 16GiB` plans for a GPU on another host: without --host-memory
    (or the spec's lms.host_memory) its host need is not checked, one line says so for all
    plans, and this machine's free memory is never read; with --host-memory it is checked
    against that size. Planning for a GPU warns of nothing about the emulated device."""
    from suite.running.planning import HostCheck, plan_spec

    spec = tiny_spec("[48, 64]", SWAPPED)
    with caplog.at_level(logging.WARNING, logger="lms"):
        unchecked = plan_spec(spec, tmp_path, device_memory=16 * 2**30)
    assert [p.plan.params.resolution for p in unchecked] == [48, 64]
    for planned in unchecked:
        plan = planned.plan
        assert plan.target == "gpu" and plan.device_bytes == 16 * 2**30
        assert plan.report.host_peak_bytes > 0  # it swaps: a host need there was to check
        assert plan.host_memory == HostCheck(None, None) and plan.host_memory.fits is None
        assert planned.to_dict()["host_memory"] == {"limit": None, "fits": None, "shortfall": None}
    assert capsys.readouterr().err.splitlines() == [HOST_NOT_CHECKED]
    lms_records = [r for r in caplog.records if r.name.startswith("lms")]
    assert [r.getMessage() for r in lms_records if r.levelno >= logging.WARNING] == []

    one = tiny_spec("[48]", SWAPPED)
    gpu = 16 * 2**30
    (small,), (large,) = (
        [p.plan.host_memory for p in plan_spec(one, tmp_path, device_memory=gpu, host_memory=size)]
        for size in (2**20, 2**39)
    )
    assert (small.fits, large.fits) == (False, True)
    assert (small.limit, large.limit) == (2**20, 2**39)
    assert "over the 1.00 MiB of host memory given" in small.shortfall
    err = capsys.readouterr().err
    assert HOST_NOT_CHECKED not in err and err.count("g: host memory: the plan holds") == 1


def test_a_plan_for_another_host_honours_the_specs_host_memory(tmp_path, capsys):
    from suite.running.planning import plan_spec

    given = SWAPPED.replace("sync_mode = 0", 'sync_mode = 0, host_memory = "1MiB"')
    (planned,) = plan_spec(tiny_spec("[64]", given), tmp_path, device_memory=16 * 2**30)
    checked = planned.plan.host_memory
    assert checked.limit == 2**20 and checked.fits is False
    assert HOST_NOT_CHECKED not in capsys.readouterr().err


def test_a_plan_for_this_host_is_checked_against_what_it_has_available(tmp_path, capsys):
    """Without --device-memory a plan is for the trial as it runs here (the emulated device): its
    host need (the device's buffers included) is checked against this host's available memory."""
    from suite.running.planning import HostCheck, plan_spec

    spec = tiny_spec("[64]", f'memory_budget = "64MiB"\n{SWAPPED}')
    (planned,) = plan_spec(spec, tmp_path)
    plan = planned.plan
    assert plan.target == "emulated" and plan.device_bytes == 64 * 2**20
    assert plan.host_memory == HostCheck("auto", None) and plan.host_memory.fits is True
    assert HOST_NOT_CHECKED not in capsys.readouterr().err
