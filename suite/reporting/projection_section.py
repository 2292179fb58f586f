"""The report's "Projected throughput per link" section: `inv project`'s projection.json as a
table, and a plot of images/sec against link bandwidth with the measured points of emulated-link
records of the same workload and size."""

from pathlib import Path

from tabulate import tabulate

from suite.records import record_params
from suite.reporting.figures import finish, new_figure
from suite.running.projection import load_projection
from suite.units import format_bytes


def _measured_points(records: list[dict]) -> dict:
    """{(workload, resolution, batch): [(bandwidth, images/sec)]} of ok records with an emulated
    link."""
    points = {}
    for record in records:
        if record["outcome"] != "ok":
            continue
        params = record_params(record)
        link = (params.lms or {}).get("link")
        rate = record["metrics"].get("images_per_sec")
        if link and rate:
            key = (params.workload, params.resolution, params.batch)
            points.setdefault(key, []).append((link["bandwidth"], rate["mean"]))
    return points


def _per_direction(link: dict) -> str:
    """ "16 GB/s", or "12.2 / 12.9 GB/s" (host to device / device to host) where they differ."""
    into, out = link["bandwidth"], link.get("out_bandwidth", link["bandwidth"])
    if into == out:
        return f"{into / 1e9:g} GB/s"
    return f"{into / 1e9:g} / {out / 1e9:g} GB/s"


def projection_section(records: list[dict], output_dir: Path) -> dict | None:
    projections = load_projection(output_dir)
    if not projections:
        return None
    rows = []
    for p in projections:
        size = f"{p['resolution']}px b{p['batch']} {p['precision']}"
        for link in p["links"]:
            rows.append(
                [
                    f"{p['workload']} {size} ({p['study']})",
                    p["gpu"],
                    link["description"],
                    _per_direction(link),
                    f"{link['images_per_sec']:.3g}",
                    f"{link['images_per_sec'] / p['images_per_sec_without_link_waits']:.2f}",
                    f"{link['busy_in_s'] / link['step_seconds']:.0%}",
                ]
            )
    headers = [
        "trial",
        "compute",
        "link",
        "per direction (in / out)",
        "images/sec",
        "of compute-bound",
        "link busy (in)",
    ]
    moved = {
        f"{p['workload']} {p['resolution']}px b{p['batch']}": (
            format_bytes(p["out_bytes_per_step"]),
            format_bytes(p["in_bytes_per_step"]),
        )
        for p in projections
    }
    plot = _plot(projections, _measured_points(records), output_dir / "projection.png")
    return {
        "table": tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "moved": moved,
        "plot": "projection.png" if plot else None,
    }


def _plot(projections, measured, path: Path) -> bool:
    figure, axis = new_figure()
    for p in projections:
        label = f"{p['workload']} {p['resolution']}px b{p['batch']} ({p['gpu']})"
        links = sorted(p["links"], key=lambda link: link["bandwidth"])
        xs = [link["bandwidth"] / 1e9 for link in links]
        line = axis.plot(xs, [link["images_per_sec"] for link in links], "o-", label=label)[0]
        for link, x in zip(links, xs, strict=True):
            axis.annotate(
                link["link"],
                (x, link["images_per_sec"]),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, -10),
            )
        points = measured.get((p["workload"], p["resolution"], p["batch"]))
        if points and p["gpu"] == "host":
            axis.plot(
                [b / 1e9 for b, _ in points],
                [r for _, r in points],
                "x",
                color=line.get_color(),
                markersize=9,
                label=f"{p['workload']} measured, emulated link",
            )
    axis.set_xscale("log")
    return finish(
        figure,
        axis,
        path,
        "link bandwidth host to device (GB/s)",
        "images/sec",
        "Projected LMS throughput per CPU-GPU link",
    )
