"""The history of every run (`inv history`): per workload, host and configuration (LMS off or on
with its settings), throughput per run with its between-process interval and the regression
gate's verdicts, the LMS limits per run, and where the suite commit, the image, TensorFlow or the
host description changed. Built from stored records only (asv's history, the suite's statistics).

What callers use (the site's index embeds the plots):

    history = build_history(results_dir, baseline=None)   # -> History (frozen, typed)
    files = write_history(history, output_dir)             # suite.reporting.history_page
    files.page   -> Path  history.md        the Markdown page (tables, notes, plots linked)
    files.data   -> Path  history.json      History.to_dict(): every number on the page
    files.plots  -> (Plot(workload, path, title), ...): one PNG per workload,
                    path = history-<workload>.png relative to output_dir, title as drawn
    files.lines()   one line per file (what `inv history` prints)
`inv history` writes them to <invoke.yaml suite.reports>/history/ by default: the reports
directory `inv publish` publishes (the nightly chain runs it before publishing).

Runs. A run is the trial records sharing a `run` id: one `inv run` (its rounds share it, a
resumed run continues it, `--force` starts a new one; a rerun without `--force` records only
what was missing, under a new id). Records written before run ids existed (the oldest schema-1
ones) have none: they are grouped by host and day, and the page says so. A run's date is its
first record's start. A search record has no run id: it belongs to the run of the trials it ran
(tagged with its hash, finished within it); one whose trials were all reused, to the newest run
of its host begun before it; else to a day group of its own.

Points. Throughput is images/sec per trial process (the process is the sample, docs/
statistics.md): the point is the geometric mean over a run's processes that trained, its
interval the 95 % t interval on the logarithms between processes (`suite.stats`, as the gate's
ratios). One process has no between-process interval and says so.

Verdicts. Each run is checked with the regression gate's own rules (suite.reporting.regress:
tolerance, alpha 0.002, Welch's t on logs, per machine speed) against the run before it in the
same series: that says *where* a change happened, beside the marker of what changed there,
which a comparison with one baseline cannot (it shows the drift, not its step). Given a baseline
file (`inv baseline`'s), each run is also checked against it: what `inv regress` would have
said of that run. Series are per spec hash, as the gate pairs only equal hashes.
"""

import logging
import math
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from suite.errors import SuiteError
from suite.records import (
    HostDescription,
    TrialRecord,
    load_host,
    load_searches,
    load_trials,
)
from suite.reporting.baseline import Baseline, Entry, Process, load_baseline
from suite.reporting.history_changes import Change, changes_between, missing_fields
from suite.reporting.history_limits import Limit, limits_per_run
from suite.reporting.regress import ALPHA, TOLERANCE, Row, compare_run, name_configurations
from suite.stats import t_quantile

CONFIDENCE = 0.95  # of a point's interval (the report's ratios use the same)


@dataclass(frozen=True)
class Run:
    """One run: its key (the run id, or "day:<host>:<date>" for records without one), when
    it began, its hosts, and each host's description (None: missing or unreadable)."""

    key: str
    started_at: str
    hosts: tuple[str, ...]
    legacy: bool  # grouped by host and day: no run id (schema 1, or searches alone)
    descriptions: dict[str, HostDescription | None] = field(compare=False, repr=False)

    @property
    def label(self) -> str:
        """ "2026-11-25 19:00 (3f2a9c01)": what the page and the plot call it."""
        when = self.started_at[:16].replace("T", " ")
        if self.legacy:  # a day of one host: its host tells two such days apart
            return f"{self.started_at[:10]} ({', '.join(self.hosts)}, no run id)"
        return f"{when} ({self.key[:8]})"


@dataclass(frozen=True)
class Verdict:
    """The gate's verdict on a run against another (the run before it, or the baseline)."""

    verdict: str  # regression, improvement, unchanged, inconclusive, first run, baseline
    change: float | None = None  # ratio of geometric means, less 1
    interval: tuple[float, float] | None = None  # of the change, at 1 - alpha
    p: float | None = None
    reason: str | None = None

    @property
    def text(self) -> str:
        if self.change is None:
            return self.verdict + (f" ({self.reason})" if self.reason else "")
        spread = f" ({self.interval[0]:+.0%} to {self.interval[1]:+.0%})" if self.interval else ""
        why = f"; {self.reason}" if self.reason else ""
        return f"{self.verdict}: {self.change:+.1%}{spread}{why}"


@dataclass(frozen=True)
class Point:
    """One series at one run."""

    run: str
    started_at: str  # the run's (when it began), so that a run stands at one date
    rate: float | None  # images/sec: geometric mean over processes that trained
    low: float | None  # its 95 % interval between processes; None with one process
    high: float | None
    processes: int  # that trained
    outcomes: str  # "5 ok", "2 ok, 1 out_of_memory"
    previous: Verdict
    baseline: Verdict | None  # None: no baseline given, or it has no entry for this series


@dataclass(frozen=True)
class Series:
    """One workload configuration on one host across runs (one spec hash)."""

    workload: str
    host: str
    lms: str  # "off", "on (auto-tuned)", ...
    configuration: str  # "googlenet 64px b2 fp32"
    spec_hash: str
    points: tuple[Point, ...]

    @property
    def label(self) -> str:
        return f"{self.host} · {self.configuration} · LMS {self.lms}"


@dataclass(frozen=True)
class History:
    """Everything the history page, its JSON and its plots show."""

    results_dir: str
    runs: tuple[Run, ...]  # oldest first
    series: tuple[Series, ...]
    limits: tuple[Limit, ...]
    changes: tuple[Change, ...]
    notes: tuple[str, ...]  # what is missing or was skipped, said on the page
    baseline: str | None
    tolerance: float
    alpha: float

    @property
    def workloads(self) -> list[str]:
        return sorted({s.workload for s in self.series} | {lim.workload for lim in self.limits})

    def to_dict(self) -> dict:
        values = asdict(self)
        for run, stored in zip(self.runs, values["runs"], strict=True):
            del stored["descriptions"]
            stored["label"] = run.label
            stored["missing_descriptions"] = [h for h, d in run.descriptions.items() if d is None]
        for change, stored in zip(self.changes, values["changes"], strict=True):
            stored["label"] = change.label
        return values


def interval(rates: list[float]) -> tuple[float, float | None, float | None]:
    """Geometric mean of per-process rates and its 95 % t interval on the logarithms (rates are
    ratios: their noise is multiplicative); no interval from one process."""
    logs = [math.log(r) for r in rates]
    centre = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(centre), None, None
    half = t_quantile(0.5 + CONFIDENCE / 2, len(logs) - 1) * statistics.stdev(logs)
    half /= math.sqrt(len(logs))
    return math.exp(centre), math.exp(centre - half), math.exp(centre + half)


def _runs(trials: list[TrialRecord]) -> dict[str, list[TrialRecord]]:
    """{run key: its records}; records before run ids grouped by host and day."""
    grouped = defaultdict(list)
    for record in trials:
        grouped[record.run or f"day:{record.host}:{record.started_at[:10]}"].append(record)
    return grouped


def _entry(records: list[TrialRecord], key: str) -> Entry | None:
    """The gate's view of run `key`'s processes (as `inv baseline` takes them); None if none
    trained. Its run is the key, so that two days without run ids compare as two runs."""
    ok = [r for r in records if r.ok]
    if not ok:
        return None
    p = ok[0].params
    processes = tuple(map(Process.of, ok))
    mean = statistics.fmean(x.rate for x in processes)
    return Entry(
        ok[0].host,
        ok[0].spec_hash,
        p.workload,
        p.resolution,
        p.batch,
        mean,
        processes,
        run=key,
    )


def _verdict(
    entry: Entry | None, records: list[TrialRecord], tolerance, alpha, first: str
) -> Verdict:
    if entry is None:
        return Verdict(first)
    row = compare_run(entry, records, tolerance, alpha)
    if row.verdict == "no new run":
        return Verdict("baseline", reason="this run is the baseline")
    return Verdict(row.verdict, row.change, row.interval, row.p, row.reason)


def _outcomes(records: list[TrialRecord]) -> str:
    counts = defaultdict(int)
    for record in records:
        counts[record.outcome] += 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))


def _series(
    runs: dict[str, list[TrialRecord]],
    started: dict[str, str],  # run -> when it began: every series' point of a run is placed there
    baseline: Baseline | None,
    tolerance,
    alpha,
) -> list[Series]:
    by_series = defaultdict(lambda: defaultdict(list))  # (host, spec_hash) -> run -> records
    for key, records in runs.items():
        for record in records:
            if record.spec.search is None:  # a search's trials are its limit, not a series
                by_series[(record.host, record.spec_hash)][key].append(record)
    found, rows = [], []
    for (host, spec_hash), per_run in by_series.items():
        points, before = [], None
        accepted = baseline.entries.get(f"{host}/{spec_hash}") if baseline else None
        for key in sorted(per_run, key=started.__getitem__):
            records = per_run[key]
            rates = [r.metrics.images_per_sec.mean for r in records if r.ok]
            rate, low, high = interval(rates) if rates else (None, None, None)
            first = "no earlier run trained" if points else "first run"
            points.append(
                Point(
                    key,
                    started[key],
                    rate,
                    low,
                    high,
                    len(rates),
                    _outcomes(records),
                    _verdict(before, records, tolerance, alpha, first),
                    _verdict(accepted, records, tolerance, alpha, "") if accepted else None,
                )
            )
            before = _entry(records, key) or before
        p = per_run[next(iter(per_run))][-1].params
        found.append(Series(p.workload, host, "", "", spec_hash, tuple(points)))
        rows.append(
            Row(
                host,
                p.workload,
                "",
                p.resolution,
                p.batch,
                f"{host}/{spec_hash}",
                params=p.to_dict(),
            )
        )
    # named as the gate names its rows: workload, size, batch, and what else tells them apart
    found = [
        replace(s, lms=row.lms, configuration=row.configuration)
        for s, row in zip(found, name_configurations(rows), strict=True)
    ]
    return sorted(
        found, key=lambda s: (s.workload, s.host, s.lms != "off", s.configuration, s.spec_hash)
    )


class _Warnings(logging.Handler):
    """The records' warnings (a skipped line, an unreadable description), kept for the page."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def build_history(
    results_dir: Path, baseline: Path | None = None, tolerance=TOLERANCE, alpha=ALPHA
) -> History:
    """The history of every run in `results_dir` (module docstring). A SuiteError (one line) when
    the directory is missing or holds no records; what is missing from some runs (run ids, host
    descriptions, skipped records) is in `notes`."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise SuiteError(
            f"results directory {results_dir} does not exist: run `inv run` first, or give "
            "--results"
        )
    warnings = _Warnings()
    logger = logging.getLogger("suite.records")
    logger.addHandler(warnings)
    try:
        trials, searches = load_trials(results_dir), load_searches(results_dir)
        accepted = load_baseline(Path(baseline)) if baseline else None
        runs = _runs(trials)
        started = {k: min(r.started_at for r in rs) for k, rs in runs.items()}
        refs = defaultdict(dict)  # run -> host -> ref of its newest record
        for key, records in runs.items():
            for record in sorted(records, key=lambda r: r.finished_at):
                refs[key][record.host] = record.host_ref
        described = {
            key: {h: load_host(results_dir, ref) for h, ref in sorted(refs[key].items())}
            for key in runs
        }
        limits = limits_per_run(searches, runs, started)
        for limit in limits:  # searches without a run of trials: a day of their own
            if limit.run not in runs:
                runs[limit.run] = []
                started[limit.run] = min(x.started_at for x in limits if x.run == limit.run)
                described[limit.run] = {limit.host: load_host(results_dir, limit.host_ref)}
    finally:
        logger.removeHandler(warnings)
    if not trials and not searches:
        raise SuiteError(
            f"no records in {results_dir}: nothing to show a history of (run `inv run` first)"
        )
    run_list = tuple(
        Run(
            key, started[key], tuple(sorted(described[key])), key.startswith("day:"), described[key]
        )
        for key in sorted(runs, key=started.__getitem__)
    )
    notes = list(_notes(run_list)) + warnings.lines
    return History(
        str(results_dir),
        run_list,
        tuple(_series(runs, started, accepted, tolerance, alpha)),
        tuple(replace(limit, started_at=started[limit.run]) for limit in limits),
        tuple(changes_between(run_list)),
        tuple(dict.fromkeys(notes)),
        str(baseline) if baseline else None,
        tolerance,
        alpha,
    )


def _notes(runs: tuple[Run, ...]):
    """What the page must say is missing from some runs."""
    legacy = [r.label for r in runs if r.legacy]
    if legacy:
        yield (
            f"{len(legacy)} run(s) grouped by host and day, their records having no run id "
            "(trial records written before run ids, schema 1, or limit searches that ran no "
            f"trials of their own): {', '.join(legacy)}"
        )
    for run in runs:
        for host, description in run.descriptions.items():
            if description is None:
                yield (
                    f"run {run.label} on {host}: host description missing or unreadable; what "
                    "changed at this run is unknown"
                )
            elif lacking := missing_fields(description):
                yield f"run {run.label} on {host}: host description lacks {', '.join(lacking)}"
