import math

import pytest

from suite.stats import summarize_rates, throughput_metrics
from suite.workloads import WORKLOADS


def test_rates_mean_stderr_jitter_total():
    summary = summarize_rates([0.5, 0.5, 1.0, 0.25], items_per_step=2)
    rates = [4, 4, 2, 8]
    assert summary["mean"] == pytest.approx(4.5)
    population_sd = math.sqrt(sum((r - 4.5) ** 2 for r in rates) / 4)
    assert summary["stderr"] == pytest.approx(population_sd / 2)
    # median 4, absolute deviations 0,0,2,4 -> median 1
    assert summary["jitter"] == pytest.approx(1.4826)
    assert summary["total"] == pytest.approx(8 / 2.25)


def test_pixels_and_voxels_units():
    """The workload chooses the unit (WorkloadInfo.rate_key), once for records, tables and plots."""
    googlenet, unet3d = WORKLOADS["googlenet"], WORKLOADS["unet3d"]
    assert (googlenet.rate_key, googlenet.rate_unit) == ("pixels_per_sec", "Mpixels/sec")
    assert (unet3d.rate_key, unet3d.side_label) == ("voxels_per_sec", "cube side (voxels)")
    assert "pixels_per_sec" in throughput_metrics([1.0], 2, 100, googlenet.rate_key)
    voxels = throughput_metrics([2.0], 1, unet3d.elements_per_sample(10), unet3d.rate_key)
    assert voxels["voxels_per_sec"]["mean"] == pytest.approx(500)


def test_no_steps_is_an_error():
    with pytest.raises(ValueError):
        summarize_rates([], 1)


def test_t_distribution_matches_published_quantiles():
    from suite.stats import t_cdf, t_quantile

    # two-sided 95 % and 99.8 % critical values (any t table)
    for df, q975, q999 in ((2, 4.303, 22.327), (4, 2.776, 7.173), (10, 2.228, 4.144)):
        assert t_quantile(0.975, df) == pytest.approx(q975, abs=1e-3)
        assert t_quantile(0.999, df) == pytest.approx(q999, abs=1e-3)
    assert t_cdf(0.0, 3.7) == pytest.approx(0.5)
    assert t_cdf(1.96, 1e6) == pytest.approx(0.975, abs=1e-4)


def test_ratio_interval_covers_the_true_ratio_as_often_as_it_claims():
    """Per-process rates with multiplicative noise (a lognormal, as machine load gives): the 95 %
    interval of the ratio of two hosts holds the true ratio in ~95 % of repeated experiments."""
    import math
    import random

    from suite.stats import ratio_interval

    rng, truth, hits, trials = random.Random(0), 1.3, 0, 2000
    for _ in range(trials):
        a = [13.0 * math.exp(rng.gauss(0, 0.15)) for _ in range(3)]
        b = [10.0 * math.exp(rng.gauss(0, 0.25)) for _ in range(4)]
        interval = ratio_interval(a, b)
        hits += interval["low"] <= truth <= interval["high"]
    assert 0.93 <= hits / trials <= 0.97


def test_ratio_text_says_when_there_is_no_difference_or_no_uncertainty():
    from suite.stats import ratio_interval, ratio_text

    assert ratio_text(ratio_interval([10, 10.5, 9.8], [5, 5.2, 4.9])) == "2.01× (1.86–2.16)"
    same = ratio_text(ratio_interval([17.0, 8.3, 7.35], [9.0, 12.0, 16.0]))
    assert same.endswith("no significant difference)")
    assert ratio_text(ratio_interval([10.0], [5.0, 5.5])) == (
        "1.91× (1 process: no uncertainty known)"
    )
