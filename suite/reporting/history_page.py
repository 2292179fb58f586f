"""`write_history`: the history (suite.reporting.history) as files in one directory: the Markdown
page rendered from reports/templates/history.md.j2 (Markdown stays the source, as the report's),
its data as JSON, and one PNG per workload."""

import json
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from tabulate import tabulate

from suite.records import utc_now, write_atomic
from suite.reporting.history import History, Series
from suite.reporting.history_plot import Plot, plot_workload
from suite.reporting.report import templates

PAGE = "history.md"
DATA = "history.json"


@dataclass(frozen=True)
class HistoryFiles:
    """What write_history wrote: absolute paths; each plot's `path` is relative to `directory`."""

    directory: Path
    page: Path
    data: Path
    plots: tuple[Plot, ...]

    def lines(self) -> list[str]:
        """One line per file, as `inv history` prints them."""
        return [
            f"history: {self.page}",
            f"history data: {self.data}",
            *(f"history plot: {self.directory / p.path} ({p.workload})" for p in self.plots),
        ]


def _rate(point) -> str:
    if point.rate is None:
        return "—"
    if point.low is None:
        return f"{point.rate:.3g} (1 process: no interval)"
    return f"{point.rate:.3g} ({point.low:.3g}–{point.high:.3g}, {point.processes} processes)"


def _throughput_table(series: list[Series], labels: dict, with_baseline: bool) -> str | None:
    rows = []
    for one in series:
        for p in one.points:
            row = [labels[p.run], one.host, one.configuration, one.lms, _rate(p), p.outcomes]
            row.append(p.previous.text)
            if with_baseline:
                row.append(p.baseline.text if p.baseline else "—")
            rows.append(row)
    if not rows:
        return None
    headers = ["run", "host", "configuration", "LMS", "images/sec", "outcomes", "vs run before"]
    headers += ["vs baseline"] if with_baseline else []
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _limits_table(history: History, workload: str, labels: dict) -> str | None:
    """A row per run, host, search kind and LMS setting: the limit LMS off and on (each with
    its boundary's verdict)."""
    cells = defaultdict(dict)
    settings = defaultdict(set)  # (run, host, kind) -> the LMS-on settings searched
    for lim in history.limits:
        if lim.workload == workload and lim.mode == "on":
            settings[(lim.run, lim.host, lim.kind)].add(lim.lms)
    for lim in history.limits:
        if lim.workload != workload:
            continue
        text = lim.text + (f" ({lim.verdict})" if lim.verdict else "")
        where = (lim.run, lim.host, lim.kind)
        for setting in [lim.lms] if lim.mode == "on" else sorted(settings[where]) or ["—"]:
            cells[(lim.started_at, *where, setting)][lim.mode] = text
    rows = [
        [labels[run], host, kind, modes.get("off", "—"), modes.get("on", "—"), setting]
        for (_, run, host, kind, setting), modes in sorted(cells.items())
    ]
    if not rows:
        return None
    headers = ["run", "host", "search", "LMS off", "LMS on", "LMS setting"]
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _changes_table(history: History, labels: dict) -> str | None:
    rows = [[labels[c.run], c.host, c.label] for c in history.changes]
    if not rows:
        return None
    return tabulate(rows, ["run", "host", "changed"], tablefmt="github", disable_numparse=True)


def write_history(
    history: History, output_dir: Path, title: str = "LMS benchmark history"
) -> HistoryFiles:
    """Write history.md, history.json and history-<workload>.png into `output_dir` (made if
    missing); each file replaced whole, so a reader never sees half of one."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    labels = {run.key: run.label for run in history.runs}
    workloads, plots = [], []
    for workload in history.workloads:
        series = [s for s in history.series if s.workload == workload]
        plot = plot_workload(history, workload, output_dir)
        plots += [plot] if plot else []
        workloads.append(
            {
                "workload": workload,
                "plot": plot,
                "table": _throughput_table(series, labels, history.baseline is not None),
                "limits": _limits_table(history, workload, labels),
            }
        )
    template = templates().get_template("history.md.j2")
    text = template.render(
        title=title,
        generated_at=utc_now(),
        results_dir=history.results_dir,
        runs=history.runs,
        tolerance=history.tolerance,
        alpha=history.alpha,
        baseline=history.baseline,
        notes=history.notes,
        changes_table=_changes_table(history, labels),
        workloads=workloads,
    )
    page, data = output_dir / PAGE, output_dir / DATA
    write_atomic(page, text)
    write_atomic(data, json.dumps(history.to_dict(), indent=1))
    return HistoryFiles(output_dir, page, data, tuple(plots))
