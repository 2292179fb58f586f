"""The report's sweep plots: data rate (Mpixels/s or Mvoxels/s) against resolution, one line per
host and LMS mode, with the resolution where LMS became necessary marked.

A sweep is found in the records, not in a spec: trial records (not a search's) whose parameters
are equal except the resolution and LMS form one series, whatever study ran them.
"""

import statistics
from collections import defaultdict
from pathlib import Path

from suite.specs import trial_hash
from suite.workloads import WORKLOADS


def _series_key(params: dict) -> str:
    rest = {k: v for k, v in params.items() if k not in ("resolution", "lms")}
    return trial_hash(rest)


def sweep_series(records: list[dict]) -> dict:
    """{key: [records]} of the series that have two or more resolutions."""
    series = defaultdict(list)
    for record in records:
        if "search" not in record["spec"]:
            series[_series_key(record["params"])].append(record)
    return {
        key: group
        for key, group in series.items()
        if len({r["params"]["resolution"] for r in group}) >= 2
    }


def switch_points(group: list[dict]) -> dict:
    """{host: the smallest resolution whose LMS-off trial did not train}."""
    points = {}
    for record in group:
        if "lms" not in record["params"] and record["outcome"] != "ok":
            host, resolution = record["host"], record["params"]["resolution"]
            points[host] = min(points.get(host, resolution), resolution)
    return points


def plot_sweeps(records: list[dict], output_dir: Path) -> list[dict]:
    """Write one PNG per series; return [{title, file, switch}] for the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots = []
    for key, group in sorted(sweep_series(records).items()):
        params = group[0]["params"]
        info = WORKLOADS[params["workload"]]
        unit_key = "voxels_per_sec" if info.spatial_dims == 3 else "pixels_per_sec"
        lines = defaultdict(lambda: defaultdict(list))
        for record in group:
            if record["outcome"] == "ok" and unit_key in record["metrics"]:
                mode = "LMS on" if "lms" in record["params"] else "LMS off"
                rate = record["metrics"][unit_key]["mean"] / 1e6
                lines[(record["host"], mode)][record["params"]["resolution"]].append(rate)
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
        side = "cube side (voxels)" if info.spatial_dims == 3 else "image side (pixels)"
        axis.set_xlabel(side)
        axis.set_ylabel("Mvoxels/sec" if info.spatial_dims == 3 else "Mpixels/sec")
        title = f"{params['workload']}, batch {params['batch']}, {params['precision']}"
        axis.set_title(f"Data rate across resolutions: {title}")
        axis.legend(fontsize=8)
        figure.tight_layout()
        name = f"sweep-{params['workload']}-{key[:8]}.png"
        output_dir.mkdir(parents=True, exist_ok=True)
        figure.savefig(output_dir / name, dpi=100)
        plt.close(figure)
        plots.append({"title": title, "file": name, "switch": switch})
    return plots
