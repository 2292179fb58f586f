"""The history's plot per workload: images/sec per run by date, one series per host and
configuration (LMS off, LMS on with its settings) with its 95 % interval between processes, the
runs the gate called a regression against the run before ringed, and a vertical line where the
suite commit, the image, TensorFlow or the host description changed, named in the legend."""

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from suite.reporting.figures import finish, new_figure

LINE_STYLES = ("--", ":", "-.", (0, (5, 1, 1, 1)))


@dataclass(frozen=True)
class Plot:
    """One workload's plot: its file (relative to the history's directory) and its title."""

    workload: str
    path: str
    title: str


def plot_name(workload: str) -> str:
    return f"history-{workload}.png"


def _when(started_at: str) -> datetime:
    return datetime.fromisoformat(started_at)


def plot_workload(history, workload: str, output_dir: Path) -> Plot | None:
    """Draw `workload`'s plot into `output_dir`; None when no run of it trained."""
    series = [s for s in history.series if s.workload == workload]
    if not any(p.rate for s in series for p in s.points):
        return None
    title = f"{workload}: images/sec per run (95 % interval between processes)"
    figure, axis = new_figure((8, 4.6))
    ringed = False
    for number, one in enumerate(series):
        points = [p for p in one.points if p.rate is not None]
        if not points:
            continue
        colour = f"C{number % 10}"
        x = [_when(p.started_at) for p in points]
        y = [p.rate for p in points]
        below = [p.rate - p.low if p.low is not None else 0 for p in points]
        above = [p.high - p.rate if p.high is not None else 0 for p in points]
        axis.errorbar(x, y, yerr=[below, above], fmt="o-", color=colour, capsize=3, label=one.label)
        regressed = [p for p in points if p.previous.verdict == "regression"]
        if regressed:
            axis.scatter(
                [_when(p.started_at) for p in regressed],
                [p.rate for p in regressed],
                s=180,
                facecolors="none",
                edgecolors="red",
                linewidths=1.5,
                zorder=5,
                label=None if ringed else "regression against the run before",
            )
            ringed = True
    hosts = {s.host for s in series}
    at = {}  # a run's changes share one line
    for change in history.changes:
        if change.host in hosts:
            at.setdefault(change.started_at, []).append(change)
    several_hosts = len(hosts) > 1
    for number, (started_at, changes) in enumerate(sorted(at.items())):
        names = [f"{c.host}: {c.label}" if several_hosts else c.label for c in changes]
        axis.axvline(
            _when(started_at),
            color="grey",
            linestyle=LINE_STYLES[number % len(LINE_STYLES)],
            linewidth=1.2,
            label="; ".join(names),
        )
    figure.autofmt_xdate()
    name = plot_name(workload)
    finish(figure, axis, Path(output_dir) / name, "run (date it began)", "images/sec", title)
    return Plot(workload, name, title)
