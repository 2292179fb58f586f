"""The report's throughput bar chart: images/sec per workload configuration and host, LMS off
and each LMS setting side by side in their own colour and hatch, named in the legend (issue 27:
drawn as one bar per host, LMS off and on had hidden each other)."""

import textwrap
from dataclasses import dataclass
from pathlib import Path

from suite.reporting.figures import new_figure
from suite.specs.model import lms_text
from suite.units import format_bytes

HATCHES = ("", "//", "..", "xx", "\\\\", "++", "oo", "--")


@dataclass(frozen=True)
class Bar:
    """One bar: a host's mean images/sec (± standard error) for one configuration and mode."""

    configuration: str  # what is compared: workload, size, batch, precision...
    host: str
    mode: str  # "LMS off", "LMS on (auto-tuned)", ...
    mean: float
    error: float


def _configuration(workload: str, params) -> str:
    """The parameters that make a configuration, but LMS: bars with the same one compare."""
    parts = [workload, f"{params.resolution}px b{params.batch} {params.precision}"]
    if params.replicas > 1:
        parts.append(f"{params.replicas} replicas")
    if params.memory_budget_bytes:
        parts.append(f"budget {format_bytes(params.memory_budget_bytes)}")
    return "\n".join(parts)


def throughput_bars(groups: dict) -> list[Bar]:
    """The bars of `groups` ({workload: {spec_hash: {host: HostResult}}}) that trained. Two spec
    hashes with the same configuration, host and mode (they differ in steps, classes, data...)
    keep their own bars: the mode names the hash."""
    found = []
    for workload, by_hash in sorted(groups.items()):
        for spec_hash, by_host in sorted(by_hash.items()):
            for host, result in sorted(by_host.items()):
                rate = result.rate("images_per_sec")
                if rate:
                    params = result.records[-1].params
                    key = (_configuration(workload, params), host, f"LMS {lms_text(params.lms)}")
                    size = (workload, params.resolution or 0, params.batch or 0, params.replicas)
                    found.append((size, host, key, spec_hash, rate))
    found.sort(key=lambda f: f[:2])  # by size, not by hash
    keys = [key for _, _, key, _, _ in found]
    bars = []
    for _, _, (configuration, host, mode), spec_hash, (mean, error) in found:
        if keys.count((configuration, host, mode)) > 1:
            mode = f"{mode} · {spec_hash[:8]}"
        bars.append(Bar(configuration, host, mode, mean, error))
    return bars


def draw_throughput(bars: list[Bar]):
    """(figure, axis): a group of bars per configuration and host, a bar per mode in it; each
    mode one colour and hatch, one legend entry."""
    modes = sorted({b.mode for b in bars}, key=lambda m: (m != "LMS off", m))
    places = list(dict.fromkeys((b.configuration, b.host) for b in bars))
    present = {
        p: [m for m in modes if any((b.configuration, b.host, b.mode) == (*p, m) for b in bars)]
        for p in places
    }
    width = 0.8 / max(len(m) for m in present.values())
    figure, axis = new_figure((max(4.0, 0.6 * len(bars) + 0.6 * len(places)), 4.6))
    x = {}  # (place, mode) -> where its bar stands: a place's bars centred on it
    for index, place in enumerate(places):
        for slot, mode in enumerate(present[place]):
            x[place, mode] = index + (slot - (len(present[place]) - 1) / 2) * width
    for number, mode in enumerate(modes):
        mine = [b for b in bars if b.mode == mode]
        axis.bar(
            [x[(b.configuration, b.host), mode] for b in mine],
            [b.mean for b in mine],
            width,
            yerr=[b.error for b in mine],
            capsize=3,
            color=f"C{number % 10}",  # matplotlib's colour cycle
            hatch=HATCHES[number % len(HATCHES)],
            edgecolor="black",
            linewidth=0.5,
            label=textwrap.fill(mode, 44),
        )
    axis.set_xticks(range(len(places)), [f"{c}\n{h}" for c, h in places], fontsize=8)
    axis.set_ylabel("images/sec (mean ± standard error)")
    axis.set_title("Training throughput, LMS off and on")
    # beside the bars, not over them: the settings' names are long
    axis.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return figure, axis


def plot_throughput(groups: dict, path: Path) -> bool:
    """Write the chart to `path`; False if nothing trained."""
    import matplotlib.pyplot as plt

    bars = throughput_bars(groups)
    if not bars:
        return False
    figure, _ = draw_throughput(bars)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100, bbox_inches="tight")  # the legend outside the axes included
    plt.close(figure)
    return True
