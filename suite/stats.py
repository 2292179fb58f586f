"""Throughput statistics: pure functions of per-step times, as tf_cnn_benchmarks reports them.

Per-step rates, then mean +/- standard error and jitter = 1.4826 x median absolute deviation (the
MAD scaled to estimate a normal distribution's standard deviation, robust to the odd slow step).
tf_cnn_benchmarks uses the population standard deviation (ddof=0) for the error; so do we, so that
numbers stay comparable with its logs.
"""

import math
import statistics

MAD_TO_SIGMA = 1.4826


def summarize_rates(step_seconds: list[float], items_per_step: float) -> dict:
    """Rates (items/sec) over timed steps: mean, stderr, jitter, and the total (items / time)."""
    if not step_seconds:
        raise ValueError("no timed steps to summarize")
    rates = [items_per_step / seconds for seconds in step_seconds]
    mean = statistics.fmean(rates)
    stderr = statistics.pstdev(rates) / math.sqrt(len(rates))
    median = statistics.median(rates)
    jitter = MAD_TO_SIGMA * statistics.median(abs(rate - median) for rate in rates)
    total = items_per_step * len(step_seconds) / math.fsum(step_seconds)
    return {"mean": mean, "stderr": stderr, "jitter": jitter, "total": total}


def throughput_metrics(
    step_seconds: list[float], batch: int, elements_per_sample: int, spatial_dims: int
) -> dict:
    """images/sec (samples/sec) and pixels/sec (voxels/sec for 3D) summaries of one trial."""
    unit = "voxels_per_sec" if spatial_dims == 3 else "pixels_per_sec"
    return {
        "images_per_sec": summarize_rates(step_seconds, batch),
        unit: summarize_rates(step_seconds, batch * elements_per_sample),
        "step_time_s": {
            "median": statistics.median(step_seconds),
            "min": min(step_seconds),
            "max": max(step_seconds),
        },
    }
