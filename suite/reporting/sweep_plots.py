"""The report's sweep plots: data rate (Mpixels/s or Mvoxels/s) against resolution, one line per
host and LMS mode, with the resolution where LMS became necessary marked.

A sweep is found in the records, not in a spec: trial records (not a search's) whose parameters
are equal except the resolution and LMS form one series, whatever study ran them.
"""

import statistics
from collections import defaultdict
from pathlib import Path

from suite.records import TrialRecord
from suite.specs import TrialParams


def _series_key(params: TrialParams) -> str:
    """Equal for trials that differ only in resolution and LMS."""
    return params.replace(resolution=None, lms=None).hash


def sweep_series(records: list[TrialRecord]) -> dict:
    """{key: [records]} of the series that have two or more resolutions."""
    series = defaultdict(list)
    for record in records:
        if record.spec.search is None:
            series[_series_key(record.params)].append(record)
    return {
        key: group
        for key, group in series.items()
        if len({r.params.resolution for r in group}) >= 2
    }


def switch_points(group: list[TrialRecord]) -> dict:
    """{host: the smallest resolution whose LMS-off trial did not train}."""
    points = {}
    for record in group:
        if not record.params.lms and not record.ok:
            host, resolution = record.host, record.params.resolution
            points[host] = min(points.get(host, resolution), resolution)
    return points


def _plot_host(axis, color, host, off: dict, on: dict) -> None:
    """One host's series. A switch sweep (LMS off below some size, on from it) is the seeds' one
    curve: joined, circles where LMS was off, squares where on. Otherwise a line per mode."""

    def means(points):
        xs = sorted(points)
        return xs, [statistics.fmean(points[x]) for x in xs]

    if off and on and max(off) < min(on):
        (x_off, y_off), (x_on, y_on) = means(off), means(on)
        axis.plot(x_off + x_on, y_off + y_on, "-", color=color, label=f"{host}: LMS off, then on")
        axis.plot(x_off, y_off, "o", color=color)
        axis.plot(x_on, y_on, "s", color=color, markerfacecolor="white")
        return
    for mode, points, style in (("LMS off", off, "-o"), ("LMS on", on, "--s")):
        if points:
            axis.plot(*means(points), style, color=color, label=f"{host}, {mode}")


def _mark_switches(axis, switch: dict) -> None:
    """A line where LMS became necessary, one per size however many hosts switched there; labels
    staggered in height so that nearby ones do not overlap."""
    by_size = defaultdict(list)
    for host, resolution in switch.items():
        by_size[resolution].append(host)
    transform = axis.get_xaxis_transform()  # x in data, y in axes fraction
    for index, (resolution, hosts) in enumerate(sorted(by_size.items())):
        axis.axvline(resolution, color="grey", linestyle=":", linewidth=1)
        axis.text(
            resolution,
            0.97 - 0.3 * (index % 3),
            f" LMS needed: {', '.join(sorted(hosts))}",
            transform=transform,
            rotation=90,
            va="top",
            ha="right",
            fontsize=8,
        )


def plot_sweeps(records: list[TrialRecord], output_dir: Path) -> list[dict]:
    """Write one PNG per series; return [{title, file, switch}] for the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    for key, group in sorted(sweep_series(records).items()):
        params = group[0].params
        info = params.info
        lines = defaultdict(lambda: defaultdict(list))
        for record in group:
            rate = record.metrics.rate(info.rate_key) if record.ok and record.metrics else None
            if rate:
                mode = "LMS on" if record.params.lms else "LMS off"
                lines[(record.host, mode)][record.params.resolution].append(rate.mean / 1e6)
        if not lines:
            continue
        figure, axis = plt.subplots(figsize=(7, 4))
        hosts = sorted({host for host, _ in lines})
        for index, host in enumerate(hosts):
            _plot_host(
                axis,
                f"C{index}",
                host,
                lines.get((host, "LMS off"), {}),
                lines.get((host, "LMS on"), {}),
            )
        switch = switch_points(group)
        _mark_switches(axis, switch)
        axis.set_xlabel(info.side_label)
        axis.set_ylabel(info.rate_unit)
        title = f"{params.workload}, batch {params.batch}, {params.precision}"
        axis.set_title(f"Data rate across resolutions: {title}")
        handles, labels = axis.get_legend_handles_labels()
        if any("then on" in label for label in labels):  # what the markers of joined curves mean
            handles += [
                axis.plot([], [], "o", color="grey")[0],
                axis.plot([], [], "s", color="grey", markerfacecolor="white")[0],
            ]
            labels += ["trained without LMS", "trained with LMS"]
        axis.legend(handles, labels, fontsize=8)
        figure.tight_layout()
        name = f"sweep-{params.workload}-{key[:8]}.png"
        output_dir.mkdir(parents=True, exist_ok=True)
        figure.savefig(output_dir / name, dpi=100)
        plt.close(figure)
        plots.append({"title": title, "file": name, "switch": switch})
    return plots
