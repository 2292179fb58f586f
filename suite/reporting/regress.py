"""The regression gate of scheduled runs: `inv baseline` accepts results, `inv regress` compares
the newest run against them (docs/statistics.md).

A baseline (suite.reporting.baseline) holds, per host and spec hash, each trial process of an
accepted run: its images/sec and the machine's speed around it (`training.machine_speed`). The unit
of evidence is the process: its steps share one minute of machine load, so counting them as
independent samples called an unchanged suite rerun after a busy period a +49 % "improvement"
(p = 0.00094). Rates are checked against the machine's speed, and a change is a regression only
when it is beyond a tolerance (default 5 %) *and* the (1 - alpha) confidence interval of the ratio
of geometric means (Welch's t on logarithms, alpha 0.002 as asv's) excludes 1. Fewer than 2
processes on a side is "inconclusive". The division corrects part of a busy period, not all of it
(measured on two cores, GoogLeNet: one busy loop beside a trial slowed the chain to 0.64x and the
step to 0.65x, two loops to 0.40x and 0.50x), so a change is called only when it holds both as
measured and per machine speed (its significance is tested as measured: the division adds the
chain's noise); otherwise "inconclusive: run again". A trial that trained in the baseline and does
not now is a regression whatever its numbers. Comparisons pair equal spec hashes only.

The table names each row's configuration so that no two rows look alike: workload, size, batch,
LMS (off, or on with its settings), and every parameter in which a row differs from rows that
would otherwise read the same (precision, steps, memory budget, ...).
"""

import dataclasses
import json
import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from pathlib import Path

from tabulate import tabulate

from suite.errors import SuiteError
from suite.records import (
    DamagedRecord,
    TrialRecord,
    load_trials,
    readable_directory,
    utc_now,
    writable_directory,
    write_atomic,
)
from suite.records.fields import Table, read_fields
from suite.reporting.baseline import Baseline, Entry, Process, load_baseline, newest_runs
from suite.specs.model import lms_text
from suite.stats import ratio_interval

REGRESSION_FILE = "regression.json"  # beside the report it is shown in
TOLERANCE = 0.05
ALPHA = 0.002


@dataclass(frozen=True)
class Row:
    """A baseline entry against the newest run: a row of `regression.json` and of the table."""

    host: str
    workload: str
    verdict: str  # regression, improvement, unchanged, inconclusive, no new run
    resolution: int | None = None
    batch: int | None = None
    key: str | None = None  # "host/spec_hash"
    baseline: float | None = None  # images/sec, the mean over the baseline's processes
    now: float | None = None
    change: float | None = None  # the ratio of geometric means, less 1
    p: float | None = None
    interval: tuple[float, float] | None = None  # of the change, at 1 - alpha
    machine: float | None = None  # the machine's speed now over the baseline's
    processes: tuple[int, int] | None = None  # now, baseline
    params: dict | None = None
    reason: str | None = None
    lms: str | None = None  # "off", "on (auto-tuned)", ... (older files: absent)
    configuration: str | None = None  # what tells the row apart (older files: absent)

    def to_dict(self) -> dict:
        """The row as regression.json has held it (its key order; a reason only when given)."""
        values = dataclasses.asdict(self)
        verdict = {"verdict": values.pop("verdict"), "reason": values.pop("reason")}
        lms_and_configuration = {k: values.pop(k) for k in ("lms", "configuration")}
        values |= {k: v for k, v in verdict.items() if v is not None} | lms_and_configuration
        return values


@dataclass(frozen=True)
class Regression:
    """The last `inv regress` result, which the report's regression section shows."""

    checked_at: str
    tolerance: float
    alpha: float
    rows: tuple[Row, ...]

    @property
    def regressions(self) -> list[Row]:
        return [row for row in self.rows if row.verdict == "regression"]


def thresholds(tolerance, alpha) -> tuple[float, float]:
    """`inv regress`'s --tolerance and --alpha (text from the command line), checked."""
    checked = []
    for name, value in (("tolerance", tolerance), ("alpha", alpha)):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = -1.0
        if not 0 < number < 1:
            raise SuiteError(f"--{name} {value!r}: a number between 0 and 1")
        checked.append(number)
    return checked[0], checked[1]


def _machine_ratio(processes: list[Process], baseline: tuple[Process, ...]) -> float | None:
    """How fast the machine ran now against the baseline (its product chain's mean speed), when
    every process on both sides measured it; None otherwise."""
    if any(p.machine_speed is None for p in [*processes, *baseline]):
        return None
    now = statistics.fmean(p.machine_speed for p in processes)
    return now / statistics.fmean(p.machine_speed for p in baseline)


def _verdict(interval: dict, tolerance: float) -> tuple[str, str | None]:
    """Regression or improvement when the interval excludes no change and the change is beyond
    the tolerance; else unchanged."""
    change = interval["ratio"] - 1
    if not (interval["low"] > 1 or interval["high"] < 1):
        return "unchanged", None
    if abs(change) <= tolerance:
        return "unchanged", f"significant but within {tolerance:.0%}"
    return ("regression" if change < 0 else "improvement"), None


def _compare(key: str, entry: Entry, run: list[TrialRecord] | None, tolerance, alpha) -> Row:
    """The newest run of an entry's host and spec hash against it."""
    row = Row(
        entry.host,
        entry.workload,
        "no new run",
        entry.resolution,
        entry.batch,
        key=key,
        baseline=entry.images_per_sec,
        # baselines made before entries kept their parameters: the run's (same spec hash)
        params=entry.params or (run[0].params.to_dict() if run else None),
    )
    if not run or run[0].run == entry.run:
        return row
    ok = [r for r in run if r.ok]
    if not ok:
        return replace(row, verdict="regression", reason=f"did not train: {run[0].outcome}")
    processes = [Process.of(r) for r in ok]
    rates_now = [p.rate for p in processes]
    rates_then = [p.rate for p in entry.processes]
    interval = ratio_interval(rates_now, rates_then, confidence=1 - alpha)
    machine = _machine_ratio(processes, entry.processes)
    change = interval["ratio"] - 1
    row = replace(
        row,
        now=statistics.fmean(rates_now),
        change=change,
        p=interval["p"],
        machine=machine,
        processes=(len(rates_now), len(rates_then)),
        interval=None if interval["low"] is None else (interval["low"] - 1, interval["high"] - 1),
    )
    if interval["p"] is None:
        reason = "fewer than 2 trial processes on a side (repeats >= 3 to compare)"
        return replace(row, verdict="inconclusive", reason=reason)
    verdict, reason = _verdict(interval, tolerance)
    if machine is not None and verdict in ("regression", "improvement"):
        # the change must also hold per machine speed: a busy machine slows the suite and
        # the product chain alike (the division is noisy, so it checks, it does not test)
        per_machine = interval["ratio"] / machine - 1
        if not (abs(per_machine) > tolerance and per_machine * change > 0):
            verdict = "inconclusive"
            reason = (
                f"the machine ran at {machine:.2f}x its baseline speed; {change:+.0%} as "
                f"measured, {per_machine:+.0%} per machine speed: run again"
            )
    return replace(row, verdict=verdict, reason=reason)


def compare_run(entry: Entry, run: list[TrialRecord], tolerance=TOLERANCE, alpha=ALPHA) -> Row:
    """`run` (one host's records of one spec hash) against an accepted `entry` by the gate's
    rules: how the history (suite.reporting.history) judges any run against another."""
    return _compare(f"{entry.host}/{entry.spec_hash}", entry, run, tolerance, alpha)


def compare(baseline: Baseline, results_dir: Path, tolerance=TOLERANCE, alpha=ALPHA) -> list[Row]:
    """One row per baseline entry: the newest run against it. The unit of evidence is the trial
    process (its steps share one minute of machine load), rates are divided by the machine's
    measured speed, and a change counts when it is beyond `tolerance` and the (1 - alpha)
    confidence interval of the ratio excludes 1. Fewer than 2 processes on a side: inconclusive."""
    runs = newest_runs(load_trials(results_dir))
    rows = [
        _compare(key, entry, runs.get((entry.host, entry.spec_hash)), tolerance, alpha)
        for key, entry in sorted(baseline.entries.items())
    ]
    return name_configurations(rows)


def _flat(table: dict, prefix: str = "") -> dict:
    """{"lms.link.bandwidth": 2e9, "precision": "fp32", ...}: nested tables as dotted keys."""
    flat = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def name_configurations(rows: list[Row]) -> list[Row]:
    """The rows, each with its `lms` ("off", "on (auto-tuned)", ...) and its `configuration`:
    workload, size and batch, plus every parameter in which it differs from the rows of its host
    that would otherwise read the same; the spec hash where even those agree (hand-made or older
    records whose hashes differ over the same parameters)."""
    named = [
        replace(
            row,
            lms="—" if row.params is None else lms_text(row.params.get("lms")),
            configuration=f"{row.workload} {row.resolution}px b{row.batch}",
        )
        for row in rows
    ]
    alike = defaultdict(list)
    for index, row in enumerate(named):
        alike[(row.host, row.configuration, row.lms)].append(index)
    shown = {"workload", "resolution", "batch"}
    for group in (g for g in alike.values() if len(g) > 1):
        flats = [_flat(named[i].params or {}) for i in group]
        keys = sorted({k for f in flats for k in f} - shown)
        differing = [k for k in keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
        for i, flat in zip(group, flats, strict=True):
            extra = [f"{k}={flat.get(k, '—')}" for k in differing]
            named[i] = replace(named[i], configuration=" ".join([named[i].configuration, *extra]))
        if len({named[i].configuration for i in group}) < len(group):
            for i in group:
                spec_hash = named[i].key.split("/")[-1]
                named[i] = replace(
                    named[i], configuration=f"{named[i].configuration} [{spec_hash}]"
                )
    return named


def table(rows: list[Row]) -> str:
    """The rows as a GitHub table (printed by `inv regress`, shown in the report)."""

    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    def cells(r: Row):
        # rows of a regression.json written before rows named their configuration: as they are
        configuration = r.configuration or f"{r.workload} {r.resolution}px b{r.batch}"
        spread = f" ({r.interval[0]:+.0%} to {r.interval[1]:+.0%})" if r.interval else ""
        return [
            r.host,
            configuration,
            r.lms or "—",
            fmt(r.baseline, "{:.3g}"),
            fmt(r.now, "{:.3g}"),
            fmt(r.machine, "{:.2f}×"),
            fmt(r.change, "{:+.1%}") + spread,
            fmt(r.p, "{:.2g}"),
            "/".join(map(str, r.processes)) if r.processes else "—",
            r.verdict + (f" ({r.reason})" if r.reason else ""),
        ]

    headers = [
        "host",
        "configuration",
        "LMS",
        "baseline img/s",
        "now img/s",
        "machine speed",
        "change",
        "p",
        "processes now/baseline",
        "verdict",
    ]
    return tabulate([cells(r) for r in rows], headers, tablefmt="github", disable_numparse=True)


def write_regression(rows: list[Row], output_dir: Path, tolerance: float, alpha: float) -> Path:
    """The result the report's regression section is rendered from."""
    path = Path(output_dir) / REGRESSION_FILE
    payload = {
        "checked_at": utc_now(),
        "tolerance": tolerance,
        "alpha": alpha,
        "rows": [row.to_dict() for row in rows],
    }
    write_atomic(path, json.dumps(payload, indent=1))
    return path


@dataclass(frozen=True)
class Check:
    """What `inv regress` found: a row per baseline entry, and the file the report's regression
    section is rendered from."""

    rows: list[Row]
    path: Path
    tolerance: float
    alpha: float

    def lines(self) -> list[str]:
        """What `inv regress` prints: the table, and where the report finds it."""
        where = f"regression check: {self.path} (`inv report` adds it to the report)"
        return [table(self.rows), where]

    def failure(self) -> str | None:
        """The line `inv regress` exits 1 with, None when nothing regressed."""
        regressions = [r for r in self.rows if r.verdict == "regression"]
        if not regressions:
            return None
        beyond = f"beyond {self.tolerance:.0%} with p < {self.alpha}"
        return f"error: {len(regressions)} regression(s) {beyond}"


def check(baseline_file, results_dir, output_dir, tolerance, alpha) -> Check:
    """`inv regress`: the newest runs of `results_dir` against the baseline in `baseline_file`,
    with the gate's `tolerance` and `alpha` (text from the command line), written into
    `output_dir` (paths or their text); each checked in that order, before any work."""
    tolerance, alpha = thresholds(tolerance, alpha)
    output_dir = writable_directory(Path(output_dir), "--output")
    results_dir = readable_directory(Path(results_dir), "--results")
    rows = compare(load_baseline(Path(baseline_file)), results_dir, tolerance, alpha)
    return Check(rows, write_regression(rows, output_dir, tolerance, alpha), tolerance, alpha)


def load_regression(output_dir: Path) -> Regression | None:
    """The last `inv regress` result written into `output_dir`, checked; None if there is none."""
    path = Path(output_dir) / REGRESSION_FILE
    if not path.exists():
        return None
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as error:
        raise SuiteError(f"{path}: not valid JSON ({error.msg}); run inv regress again") from None
    fields = {"checked_at": str, "tolerance": (int, float), "alpha": (int, float), "rows": list}
    for name, kind in fields.items():
        if not isinstance(result, dict) or not isinstance(result.get(name), kind):
            raise SuiteError(
                f"{path}: field {name!r} is missing or has the wrong type; run inv regress again"
            )
    try:
        rows = tuple(read_fields(Row, row) for row in Table(result, str(path)).tables("rows"))
    except DamagedRecord as error:
        raise SuiteError(f"{path}: {error.problem}; run inv regress again") from None
    return Regression(result["checked_at"], result["tolerance"], result["alpha"], rows)
