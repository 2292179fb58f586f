"""The report's "Scaling" section: data-parallel trials (several replicas) against the one-replica
trial of the same workload, size and settings on the same host: images/sec in total and per
replica, and the scaling efficiency rate(N) / (N x rate(1)) with its 95 % interval (the ratio of
geometric means over trial processes, suite.stats). A table, and a plot of images/sec against
replicas with the ideal line."""

import statistics
from pathlib import Path

from tabulate import tabulate

from suite.records import TrialRecord
from suite.reporting.answer import DASH, process_rates, rate_text
from suite.reporting.figures import discard, finish, new_figure
from suite.stats import ratio_interval


def _groups(records: list[TrialRecord]) -> dict:
    """{(workload label, host): {replicas: [records]}} for configurations that ran with more
    than one replica somewhere; the key ignores gpus and nodes (same per-replica batch)."""
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
        by_key.setdefault(key, {}).setdefault(params.replicas, []).append(record)
    return {(label, host): runs for (_, label, host), runs in by_key.items() if max(runs) > 1}


def _efficiency(runs: dict, replicas: int) -> str:
    if replicas == 1 or 1 not in runs:
        return "100% (reference)" if replicas == 1 else DASH
    many, one = process_rates(runs[replicas]), process_rates(runs[1])
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
        for replicas in sorted(runs):
            # records from before replicas existed have only the total: one replica's
            per_replica = [rate / replicas for rate in process_rates(runs[replicas])]
            rows.append(
                [
                    label,
                    host,
                    replicas,
                    rate_text(runs[replicas]),
                    f"{statistics.fmean(per_replica):.3g}" if per_replica else DASH,
                    _efficiency(runs, replicas),
                ]
            )
    headers = [
        "configuration",
        "host",
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
    figure, axis = new_figure()
    drawn = False
    for (label, host), runs in sorted(groups.items()):
        points = [
            (n, statistics.fmean(process_rates(rs)))
            for n, rs in sorted(runs.items())
            if process_rates(rs)
        ]
        if not points:
            continue
        line = axis.plot(*zip(*points, strict=True), "o-", label=f"{label} on {host}")[0]
        if 1 in runs and process_rates(runs[1]):
            one = statistics.fmean(process_rates(runs[1]))
            ns = [n for n, _ in points]
            axis.plot(ns, [one * n for n in ns], ":", color=line.get_color())
        drawn = True
    if not drawn:
        return discard(figure)
    axis.set_xticks(sorted({n for runs in groups.values() for n in runs}))  # whole replicas
    return finish(
        figure,
        axis,
        path,
        "replicas (worker processes, one device each)",
        "images/sec, all replicas",
        "Data-parallel scaling (dotted: ideal from one replica)",
    )
