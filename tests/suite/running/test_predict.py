"""suite.running.predict: a search's prediction counts a size as fitting only when the host has
the host memory its plan needs, as lms checks before a trial's step runs."""

import pytest
from trial_cases import tiny_spec

import lms
from suite.errors import SuiteError
from suite.running.planning import plan_trial
from suite.running.predict import predict
from suite.specs.model import TrialParams


def _candidates(lms_table: str) -> list[dict]:
    defaults = f'lms = {{{lms_table}}}\nmemory_budget = "1GiB"'
    spec = tiny_spec("[32, 48, 64]", defaults=defaults)
    return [trial.params.to_dict() for trial in spec.trials]


def test_sizes_fit_when_the_host_holds_their_plans():
    prediction = predict(_candidates('split = "auto"'), "on", "h")
    assert prediction.largest_fit == 2
    assert all(probe.fits for probe in prediction.probes.values())


def test_no_size_fits_a_host_without_the_memory_its_plans_need():
    prediction = predict(_candidates('split = "auto", host_memory = "1MiB"'), "on", "h")
    assert prediction.largest_fit == -1
    probed = prediction.probes.values()
    assert probed and not any(probe.fits for probe in probed)
    assert all(probe.peak_bytes_with_lms <= probe.lms_budget_bytes for probe in probed)


def test_a_prediction_plans_as_its_trial_runs_here_with_the_trials_device_memory():
    """Without LMS the plain peak is simulated as the trial runs here, on the emulated device
    (CPU kernels and allocator) within its memory budget: not as a GPU, and no GPU's memory
    (NVML's total) stands in for the budget."""
    candidates = [
        t.params.to_dict() for t in tiny_spec("[32, 48]", 'memory_budget = "1GiB"').trials
    ]
    prediction = predict(candidates, "off", "h")
    assert prediction.largest_fit == 1
    probe = prediction.probes[1]
    assert probe.budget_bytes == 2**30
    planned = plan_trial(TrialParams.from_dict(candidates[1]))
    assert planned.target == "emulated"
    assert probe.peak_bytes_without_lms == planned.report.peak_bytes_without_lms
    assert lms.LMS(device_memory=2**30).target.emulated  # what "auto" means on this machine


def test_a_trial_without_a_device_memory_has_nothing_to_predict_against_without_a_gpu():
    candidates = [t.params.to_dict() for t in tiny_spec("[32]", "lms = true").trials]
    with pytest.raises(SuiteError, match="nothing to predict against: device_memory is required"):
        predict(candidates, "on", "h")
