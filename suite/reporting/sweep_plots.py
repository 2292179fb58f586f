"""The report's sweep plots: data rate (Mpixels/s or Mvoxels/s) against resolution, one line per
host and LMS mode, with the resolution where LMS became necessary marked.

A sweep is found in the records, not in a spec: trial records (not a search's) whose parameters
are equal except the resolution and LMS form one series, whatever study ran them.
"""

import statistics
from collections import defaultdict
from pathlib import Path

from suite.records import record_params
from suite.specs import TrialParams


def _series_key(params: TrialParams) -> str:
    """Equal for trials that differ only in resolution and LMS."""
    return params.replace(resolution=None, lms=None).hash


def sweep_series(records: list[dict]) -> dict:
    """{key: [records]} of the series that have two or more resolutions."""
    series = defaultdict(list)
    for record in records:
        if "search" not in record["spec"]:
            series[_series_key(record_params(record))].append(record)
    return {
        key: group
        for key, group in series.items()
        if len({record_params(r).resolution for r in group}) >= 2
    }


def switch_points(group: list[dict]) -> dict:
    """{host: the smallest resolution whose LMS-off trial did not train}."""
    points = {}
    for record in group:
        if not record_params(record).lms and record["outcome"] != "ok":
            host, resolution = record["host"], record_params(record).resolution
            points[host] = min(points.get(host, resolution), resolution)
    return points


def plot_sweeps(records: list[dict], output_dir: Path) -> list[dict]:
    """Write one PNG per series; return [{title, file, switch}] for the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    for key, group in sorted(sweep_series(records).items()):
        params = record_params(group[0])
        info = params.info
        lines = defaultdict(lambda: defaultdict(list))
        for record in group:
            if record["outcome"] == "ok" and info.rate_key in record["metrics"]:
                trial = record_params(record)
                mode = "LMS on" if trial.lms else "LMS off"
                rate = record["metrics"][info.rate_key]["mean"] / 1e6
                lines[(record["host"], mode)][trial.resolution].append(rate)
        if not lines:
            continue
        figure, axis = plt.subplots(figsize=(7, 4))
        for (host, mode), points in sorted(lines.items()):
            xs = sorted(points)
            ys = [statistics.fmean(points[x]) for x in xs]
            style = "-o" if mode == "LMS off" else "--s"
            axis.plot(xs, ys, style, label=f"{host}, {mode}")
        switch = switch_points(group)
        for host, resolution in sorted(switch.items()):
            axis.axvline(resolution, color="grey", linestyle=":", linewidth=1)
            axis.annotate(
                f"LMS needed ({host})",
                (resolution, axis.get_ylim()[1]),
                rotation=90,
                va="top",
                ha="right",
                fontsize=8,
            )
        axis.set_xlabel(info.side_label)
        axis.set_ylabel(info.rate_unit)
        title = f"{params.workload}, batch {params.batch}, {params.precision}"
        axis.set_title(f"Data rate across resolutions: {title}")
        axis.legend(fontsize=8)
        figure.tight_layout()
        name = f"sweep-{params.workload}-{key[:8]}.png"
        output_dir.mkdir(parents=True, exist_ok=True)
        figure.savefig(output_dir / name, dpi=100)
        plt.close(figure)
        plots.append({"title": title, "file": name, "switch": switch})
    return plots
