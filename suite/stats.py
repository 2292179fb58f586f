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
    step_seconds: list[float], batch: int, elements_per_sample: int, rate_key: str
) -> dict:
    """images/sec (samples/sec) and pixels/sec (voxels/sec for 3D: the workload's `rate_key`)
    summaries of one trial."""
    return {
        "images_per_sec": summarize_rates(step_seconds, batch),
        rate_key: summarize_rates(step_seconds, batch * elements_per_sample),
        "step_time_s": {
            "median": statistics.median(step_seconds),
            "min": min(step_seconds),
            "max": max(step_seconds),
        },
    }


def mann_whitney_p(first: list[float], second: list[float]) -> float:
    """Two-sided p-value of the Mann–Whitney U test (normal approximation with tie correction
    and continuity correction), the test asv uses to call a benchmark change significant.
    Needs at least 5 samples on each side; 1.0 (nothing shown) with fewer."""
    n1, n2 = len(first), len(second)
    if n1 < 5 or n2 < 5:
        return 1.0
    values = sorted([(v, 0) for v in first] + [(v, 1) for v in second])
    ranks, ties, i = [0.0] * len(values), 0.0, 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1][0] == values[i][0]:
            j += 1
        for k in range(i, j + 1):
            ranks[k] = (i + j) / 2 + 1
        size = j - i + 1
        ties += size**3 - size
        i = j + 1
    rank_first = sum(r for r, (_, side) in zip(ranks, values, strict=True) if side == 0)
    u = rank_first - n1 * (n1 + 1) / 2
    n = n1 + n2
    variance = n1 * n2 / 12 * ((n + 1) - ties / (n * (n - 1)))
    if variance <= 0:
        return 1.0
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)
    return math.erfc(max(z, 0.0) / math.sqrt(2))
