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
