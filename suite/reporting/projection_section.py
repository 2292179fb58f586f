"""The report's "Projected throughput per link" section: `inv project`'s projection.json as a
table, and a plot of images/sec against link bandwidth with the measured points of emulated-link
records of the same workload and size."""

from pathlib import Path

from tabulate import tabulate

from suite.records import LinkProjection, Projection, TrialRecord, load_projections
from suite.reporting.figures import finish, new_figure
from suite.reporting.lms_view import link_bandwidth
from suite.units import format_bytes


def _measured_points(records: list[TrialRecord]) -> dict:
    """{(workload, resolution, batch): [(bandwidth, images/sec)]} of ok records with an emulated
    link."""
    points = {}
    for record in records:
        params = record.params
        bandwidth = link_bandwidth(params)
        rate = record.metrics.images_per_sec if record.ok and record.metrics else None
        if bandwidth and rate:
            key = (params.workload, params.resolution, params.batch)
            points.setdefault(key, []).append((bandwidth, rate.mean))
    return points


def _per_direction(link: LinkProjection) -> str:
    """ "16 GB/s", or "12.2 / 12.9 GB/s" (host to device / device to host) where they differ."""
    into, out = link.bandwidth, link.out_bandwidth
    if into == out:
        return f"{into / 1e9:g} GB/s"
    return f"{into / 1e9:g} / {out / 1e9:g} GB/s"


def _size(p: Projection) -> str:
    return f"{p.workload} {p.resolution}px b{p.batch}"


def projection_section(records: list[TrialRecord], output_dir: Path) -> dict | None:
    projections = load_projections(output_dir)
    if not projections:
        return None
    rows = []
    for p in projections:
        for link in p.links:
            rows.append(
                [
                    f"{_size(p)} {p.precision} ({p.study})",
                    p.gpu,
                    link.description,
                    _per_direction(link),
                    f"{link.images_per_sec:.3g}",
                    f"{link.images_per_sec / p.images_per_sec_without_link_waits:.2f}",
                    f"{link.busy_in_s / link.step_seconds:.0%}",
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
        _size(p): (format_bytes(p.out_bytes_per_step), format_bytes(p.in_bytes_per_step))
        for p in projections
    }
    plot = _plot(projections, _measured_points(records), output_dir / "projection.png")
    return {
        "table": tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "moved": moved,
        "plot": "projection.png" if plot else None,
    }


def _plot(projections: list[Projection], measured: dict, path: Path) -> bool:
    figure, axis = new_figure()
    for p in projections:
        links = sorted(p.links, key=lambda link: link.bandwidth)
        xs = [link.bandwidth / 1e9 for link in links]
        rates = [link.images_per_sec for link in links]
        line = axis.plot(xs, rates, "o-", label=f"{_size(p)} ({p.gpu})")[0]
        for link, x in zip(links, xs, strict=True):
            axis.annotate(
                link.link,
                (x, link.images_per_sec),
                fontsize=7,
                textcoords="offset points",
                xytext=(3, -10),
            )
        points = measured.get((p.workload, p.resolution, p.batch))
        if points and p.gpu == "host":
            axis.plot(
                [b / 1e9 for b, _ in points],
                [r for _, r in points],
                "x",
                color=line.get_color(),
                markersize=9,
                label=f"{p.workload} measured, emulated link",
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
