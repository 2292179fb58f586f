"""suite.running.predict: a search's prediction counts a size as fitting only when the host has
the host memory its plan needs, as lms checks before a trial's step runs."""

from trial_cases import tiny_spec

from suite.running.predict import predict


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
