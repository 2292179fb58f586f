"""The report's "Scaling" section: data-parallel trials (several replicas) against the one-replica
trial of the same workload, size and settings on the same host: one row per layout, nodes x GPUs
per node (2 x 1 and 1 x 2 are both two replicas, over the network or within a node), images/sec
in total and per replica, and the scaling efficiency rate(N) / (N x rate(1)) with its 95 %
interval (the ratio of geometric means over trial processes, suite.stats). A table, and a plot
of images/sec against replicas, one line per node count, with the ideal line."""

import statistics
from pathlib import Path

from tabulate import tabulate

from suite.records import TrialRecord
from suite.reporting.answer import DASH, process_rates, rate_text
from suite.reporting.figures import discard, finish, new_figure
from suite.stats import ratio_interval


def _groups(records: list[TrialRecord]) -> dict:
    """{(workload label, host): {(nodes, gpus): [records]}} for configurations that ran with
    more than one replica somewhere; the key ignores gpus and nodes (same per-replica batch)."""
    by_key = {}
    for record in records:
        params = record.params
        if params.resolution is None or params.batch is None:
            continue
        base = params.replace(gpus=1, nodes=1)
        label = f"{params.workload} {params.resolution}px b{params.batch}/replica"
        label += f" {params.precision}"
        if params.lms:
            label += ", LMS"
        key = (base.hash, label, record.host)
        layout = (params.nodes, params.gpus)
        by_key.setdefault(key, {}).setdefault(layout, []).append(record)
    return {
        (label, host): runs
        for (_, label, host), runs in by_key.items()
        if max(nodes * gpus for nodes, gpus in runs) > 1
    }


ONE = (1, 1)  # one node, one device: the reference


def _efficiency(runs: dict, layout: tuple[int, int]) -> str:
    replicas = layout[0] * layout[1]
    if replicas == 1 or ONE not in runs:
        return "100% (reference)" if replicas == 1 else DASH
    many, one = process_rates(runs[layout]), process_rates(runs[ONE])
    if not many or not one:
        return DASH
    ideal = [rate * replicas for rate in one]
    interval = ratio_interval(many, ideal)
    if interval["low"] is None:  # one process on a side: no interval
        return f"{interval['ratio']:.0%} (1 process: no uncertainty known)"
    return f"{interval['ratio']:.0%} ({interval['low']:.0%}–{interval['high']:.0%})"


def scaling_section(records: list[TrialRecord], output_dir: Path) -> dict | None:
    groups = _groups(records)
    if not groups:
        return None
    rows = []
    for (label, host), runs in sorted(groups.items()):
        for nodes, gpus in sorted(runs, key=lambda layout: (layout[0] * layout[1], layout)):
            replicas = nodes * gpus
            # records from before replicas existed have only the total: one replica's
            per_replica = [rate / replicas for rate in process_rates(runs[nodes, gpus])]
            rows.append(
                [
                    label,
                    host,
                    f"{nodes} × {gpus}",
                    replicas,
                    rate_text(runs[nodes, gpus]),
                    f"{statistics.fmean(per_replica):.3g}" if per_replica else DASH,
                    _efficiency(runs, (nodes, gpus)),
                ]
            )
    headers = [
        "configuration",
        "host",
        "nodes × GPUs per node",
        "replicas",
        "images/sec (total)",
        "per replica",
        "scaling efficiency",
    ]
    plot = _plot(groups, output_dir / "scaling.png")
    return {
        "table": tabulate(rows, headers, tablefmt="github", disable_numparse=True),
        "plot": "scaling.png" if plot else None,
    }


def _plot(groups: dict, path: Path) -> bool:
    """images/sec against replicas: per configuration one line per node count (solid: one
    node, dashed: several), the ideal from one replica dotted."""
    figure, axis = new_figure()
    drawn = False
    for (label, host), runs in sorted(groups.items()):
        color = None
        for nodes in sorted({n for n, _ in runs}):
            points = [
                (n * g, statistics.fmean(process_rates(rs)))
                for (n, g), rs in sorted(runs.items(), key=lambda item: item[0][0] * item[0][1])
                if (n == nodes or (n, g) == ONE) and process_rates(rs)
            ]
            if not points:
                continue
            name = f"{label} on {host}, {nodes} node{'s' if nodes > 1 else ''}"
            style = "o-" if nodes == 1 else "s--"
            line = axis.plot(*zip(*points, strict=True), style, label=name, color=color)[0]
            color = line.get_color()
            drawn = True
        if color and ONE in runs and process_rates(runs[ONE]):
            one = statistics.fmean(process_rates(runs[ONE]))
            ns = sorted({n * g for n, g in runs})
            axis.plot(ns, [one * n for n in ns], ":", color=color)
    if not drawn:
        return discard(figure)
    axis.set_xticks(sorted({n * g for runs in groups.values() for n, g in runs}))  # whole
    return finish(
        figure,
        axis,
        path,
        "replicas (worker processes, one device each; nodes x devices per node)",
        "images/sec, all replicas",
        "Data-parallel scaling (dotted: ideal from one replica)",
    )
