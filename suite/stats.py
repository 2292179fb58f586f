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


def _incomplete_beta(a: float, b: float, x: float) -> float:
    """Regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    if x > (a + 1) / (a + b + 2):  # the fraction converges fast on this side only
        return 1.0 - _incomplete_beta(b, a, 1 - x)
    front = math.exp(
        math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    )
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    fraction = d
    for m in range(1, 300):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            fraction *= c * d
        if abs(c * d - 1.0) < 1e-12:
            break
    return front * fraction / a


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with `df` degrees of freedom (df may be fractional: Welch)."""
    tail = 0.5 * _incomplete_beta(df / 2, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The t with t_cdf(t, df) = p (bisection: exact to 1e-10, no table)."""
    low, high = -1e4, 1e4
    for _ in range(200):
        middle = (low + high) / 2
        if t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def ratio_interval(first: list[float], second: list[float], confidence: float = 0.95) -> dict:
    """How `first` compares with `second` (e.g. per-process images/sec of two hosts): the ratio
    of their geometric means and its confidence interval, Welch's t on the logarithms (rates are
    ratios; their noise is multiplicative). The unit of evidence is one value per trial process:
    steps inside one process share that minute's machine load and are not independent.

    Returns {ratio, low, high, p, n}; low/high/p are None with fewer than 2 values on a side."""
    logs_a, logs_b = [math.log(v) for v in first], [math.log(v) for v in second]
    ratio = math.exp(statistics.fmean(logs_a) - statistics.fmean(logs_b))
    result = {"ratio": ratio, "low": None, "high": None, "p": None, "n": (len(first), len(second))}
    if len(first) < 2 or len(second) < 2:
        return result
    va, vb = statistics.variance(logs_a) / len(logs_a), statistics.variance(logs_b) / len(logs_b)
    se = math.sqrt(va + vb)
    if se == 0:
        same = ratio == 1.0
        return {**result, "low": ratio, "high": ratio, "p": 1.0 if same else 0.0}
    df = (va + vb) ** 2 / (va**2 / (len(first) - 1) + vb**2 / (len(second) - 1))
    half = t_quantile(0.5 + confidence / 2, df) * se
    difference = math.log(ratio)
    p = 2 * (1 - t_cdf(abs(difference) / se, df))
    return {
        **result,
        "low": math.exp(difference - half),
        "high": math.exp(difference + half),
        "p": p,
    }


def ratio_text(interval: dict, confidence: float = 0.95) -> str:
    """ "1.83× (1.62–2.07)", "1.02× (0.91–1.15, no significant difference)", or with one
    process on a side "0.97× (1 process: no uncertainty known)"."""
    ratio = f"{interval['ratio']:.2f}×"
    if interval["low"] is None:
        return f"{ratio} ({min(interval['n'])} process: no uncertainty known)"
    bounds = f"{interval['low']:.2f}–{interval['high']:.2f}"
    if interval["low"] <= 1.0 <= interval["high"]:
        return f"{ratio} ({bounds}, no significant difference)"
    return f"{ratio} ({bounds})"
