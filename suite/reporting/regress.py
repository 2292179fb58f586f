"""The regression gate of scheduled runs: `inv baseline` accepts results, `inv regress` compares
the newest run against them (DESIGN.md §4).

A baseline holds, per host and spec hash, each trial process of an accepted run: its images/sec
and the machine's speed around it (`training.machine_speed`). The unit of evidence is the
process: its steps share one minute of machine load, so counting them as independent samples
called an unchanged suite rerun after a busy period a +49 % "improvement" (p = 0.00094). Rates are
checked against the machine's speed, and a change is a regression only when it is beyond a tolerance
(default 5 %) *and* the (1 - alpha) confidence interval of the ratio of geometric means (Welch's t
on logarithms, alpha 0.002 as asv's) excludes 1. Fewer than 2 processes on a side is
"inconclusive". The division corrects part of a busy period, not all of it (measured on two
cores, GoogLeNet: one busy loop beside a trial slowed the chain to 0.64x and the step to 0.65x,
two loops to 0.40x and 0.50x), so a change is called only when it holds both as measured and per
machine speed (its significance is tested as measured: the division adds the chain's noise);
otherwise "inconclusive: run again". A trial that trained in the baseline and does
not now is a regression whatever its numbers. Comparisons pair equal spec hashes only.

The table names each row's configuration so that no two rows look alike: workload, size, batch,
LMS (off, or on with its settings), and every parameter in which a row differs from rows that
would otherwise read the same (precision, steps, memory budget, ...).
"""

import json
import statistics
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from suite.errors import SuiteError
from suite.records import TrialRecord, load_trials, utc_now, write_atomic
from suite.specs.model import lms_text
from suite.stats import ratio_interval

BASELINE_VERSION = 2  # 2: per trial process, with the machine speed (1: per step)
REGRESSION_FILE = "regression.json"  # beside the report it is shown in
TOLERANCE = 0.05
ALPHA = 0.002


def _process(record: TrialRecord) -> dict:
    """What one trial process that trained contributes: its images/sec (mean over its steps) and
    the machine's speed around it (None for records from before it was measured)."""
    speed = record.metrics.machine_speed
    return {
        "rate": record.metrics.images_per_sec.mean,
        "machine_speed": speed.mean if speed else None,
    }


def newest_runs(records: list[TrialRecord]) -> dict:
    """{(host, spec_hash): [records of the newest run]} (a run: records sharing `run`)."""
    grouped = defaultdict(list)
    for record in records:
        grouped[(record.host, record.spec_hash)].append(record)
    newest = {}
    for key, group in grouped.items():
        last = max(group, key=lambda r: r.finished_at)
        newest[key] = [r for r in group if r.run == last.run] if last.run else [last]
    return newest


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


def make_baseline(results_dir: Path, path: Path) -> dict:
    """Accept the newest run of every (host, spec hash) that trained as the baseline."""
    entries = {}
    for (host, spec_hash), run in sorted(newest_runs(load_trials(results_dir)).items()):
        ok = [r for r in run if r.ok]
        if not ok:
            continue
        processes = [_process(r) for r in ok]
        params = ok[0].params
        entries[f"{host}/{spec_hash}"] = {
            "host": host,
            "spec_hash": spec_hash,
            "workload": params.workload,
            "resolution": params.resolution,
            "batch": params.batch,
            "params": params.to_dict(),  # what the table tells rows apart by
            "run": ok[0].run,
            "images_per_sec": statistics.fmean(p["rate"] for p in processes),
            "processes": processes,
        }
    if not entries:
        raise SuiteError(f"no trained records in {results_dir} to make a baseline of")
    baseline = {"version": BASELINE_VERSION, "accepted_at": utc_now(), "entries": entries}
    write_atomic(path, json.dumps(baseline, indent=1, sort_keys=True))
    return baseline


def load_baseline(path: Path) -> dict:
    try:
        baseline = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise SuiteError(f"baseline {path} does not exist: make one with `inv baseline`") from None
    except json.JSONDecodeError as error:
        raise SuiteError(f"baseline {path}: not valid JSON ({error})") from None
    except OSError as error:  # a directory, unreadable
        raise SuiteError(
            f"baseline {path}: cannot read it ({error.strerror}); give the "
            "baseline file `inv baseline` wrote"
        ) from None
    if baseline.get("version") != BASELINE_VERSION or "entries" not in baseline:
        raise SuiteError(
            f"baseline {path}: version {baseline.get('version')!r}; this suite "
            f"reads version {BASELINE_VERSION}"
        )
    return baseline


def _machine_ratio(processes: list[dict], baseline: list[dict]) -> float | None:
    """How fast the machine ran now against the baseline (its product chain's mean speed), when
    every process on both sides measured it; None otherwise."""
    if any(p["machine_speed"] is None for p in processes + baseline):
        return None
    now = statistics.fmean(p["machine_speed"] for p in processes)
    return now / statistics.fmean(p["machine_speed"] for p in baseline)


def _verdict(interval: dict, tolerance: float) -> tuple[str, str | None]:
    """Regression or improvement when the interval excludes no change and the change is beyond
    the tolerance; else unchanged."""
    change = interval["ratio"] - 1
    if not (interval["low"] > 1 or interval["high"] < 1):
        return "unchanged", None
    if abs(change) <= tolerance:
        return "unchanged", f"significant but within {tolerance:.0%}"
    return ("regression" if change < 0 else "improvement"), None


def compare(baseline: dict, results_dir: Path, tolerance=TOLERANCE, alpha=ALPHA) -> list[dict]:
    """One row per baseline entry: the newest run against it. The unit of evidence is the trial
    process (its steps share one minute of machine load), rates are divided by the machine's
    measured speed, and a change counts when it is beyond `tolerance` and the (1 - alpha)
    confidence interval of the ratio excludes 1. Fewer than 2 processes on a side: inconclusive."""
    runs = newest_runs(load_trials(results_dir))
    rows = []
    for key, entry in sorted(baseline["entries"].items()):
        row = {k: entry[k] for k in ("host", "workload", "resolution", "batch")}
        row.update(
            key=key,
            baseline=entry["images_per_sec"],
            now=None,
            change=None,
            p=None,
            interval=None,
            machine=None,
            processes=None,
        )
        run = runs.get((entry["host"], entry["spec_hash"]))
        # baselines made before entries kept their parameters: the run's (same spec hash)
        row["params"] = entry.get("params") or (run[0].params.to_dict() if run else None)
        if not run or run[0].run == entry["run"]:
            row["verdict"] = "no new run"
            rows.append(row)
            continue
        ok = [r for r in run if r.ok]
        if not ok:
            row["verdict"] = "regression"
            row["reason"] = f"did not train: {run[0].outcome}"
            rows.append(row)
            continue
        processes = [_process(r) for r in ok]
        rates_now = [p["rate"] for p in processes]
        rates_then = [p["rate"] for p in entry["processes"]]
        interval = ratio_interval(rates_now, rates_then, confidence=1 - alpha)
        machine = _machine_ratio(processes, entry["processes"])
        change = interval["ratio"] - 1
        row.update(
            now=statistics.fmean(rates_now),
            change=change,
            p=interval["p"],
            machine=machine,
            processes=[len(rates_now), len(rates_then)],
        )
        if interval["low"] is not None:
            row["interval"] = [interval["low"] - 1, interval["high"] - 1]
        if interval["p"] is None:
            row["verdict"] = "inconclusive"
            row["reason"] = "fewer than 2 trial processes on a side (repeats >= 3 to compare)"
            rows.append(row)
            continue
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
        row["verdict"] = verdict
        if reason:
            row["reason"] = reason
        rows.append(row)
    name_configurations(rows)
    return rows


def _flat(table: dict, prefix: str = "") -> dict:
    """{"lms.link.bandwidth": 2e9, "precision": "fp32", ...}: nested tables as dotted keys."""
    flat = {}
    for key, value in table.items():
        if isinstance(value, dict):
            flat.update(_flat(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def name_configurations(rows: list[dict]) -> None:
    """Give each row its `lms` ("off", "on (auto-tuned)", ...) and its `configuration`: workload,
    size and batch, plus every parameter in which it differs from the rows of its host that
    would otherwise read the same; the spec hash where even those agree (hand-made or older
    records whose hashes differ over the same parameters)."""
    for row in rows:
        row["lms"] = "—" if row["params"] is None else lms_text(row["params"].get("lms"))
        row["configuration"] = f"{row['workload']} {row['resolution']}px b{row['batch']}"
    alike = defaultdict(list)
    for row in rows:
        alike[(row["host"], row["configuration"], row["lms"])].append(row)
    shown = {"workload", "resolution", "batch"}
    for group in (g for g in alike.values() if len(g) > 1):
        flats = [_flat(r["params"] or {}) for r in group]
        keys = sorted({k for f in flats for k in f} - shown)
        differing = [k for k in keys if len({json.dumps(f.get(k)) for f in flats}) > 1]
        for row, flat in zip(group, flats, strict=True):
            extra = [f"{k}={flat.get(k, '—')}" for k in differing]
            row["configuration"] = " ".join([row["configuration"], *extra])
        if len({r["configuration"] for r in group}) < len(group):
            for row in group:
                row["configuration"] += f" [{row['key'].split('/')[-1]}]"


def table(rows: list[dict]) -> str:
    """The rows as a GitHub table (printed by `inv regress`, shown in the report)."""

    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    def cells(r):
        # rows of a regression.json written before rows named their configuration: as they are
        configuration = (
            r.get("configuration") or f"{r['workload']} {r['resolution']}px b{r['batch']}"
        )
        interval = r.get("interval")
        spread = f" ({interval[0]:+.0%} to {interval[1]:+.0%})" if interval else ""
        processes = "/".join(map(str, r["processes"])) if r.get("processes") else "—"
        verdict = r["verdict"] + (f" ({r['reason']})" if r.get("reason") else "")
        return [
            r["host"],
            configuration,
            r.get("lms", "—"),
            fmt(r["baseline"], "{:.3g}"),
            fmt(r["now"], "{:.3g}"),
            fmt(r["machine"], "{:.2f}×"),
            fmt(r["change"], "{:+.1%}") + spread,
            fmt(r["p"], "{:.2g}"),
            processes,
            verdict,
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


def write_regression(rows: list[dict], output_dir: Path, tolerance: float, alpha: float) -> Path:
    """The result the report's regression section is rendered from."""
    path = Path(output_dir) / REGRESSION_FILE
    payload = {"checked_at": utc_now(), "tolerance": tolerance, "alpha": alpha, "rows": rows}
    write_atomic(path, json.dumps(payload, indent=1))
    return path


def load_regression(output_dir: Path) -> dict | None:
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
    for index, row in enumerate(result["rows"]):
        if not isinstance(row, dict) or not {"host", "workload", "verdict"} <= set(row):
            raise SuiteError(
                f"{path}: rows[{index}] lacks host, workload or verdict; run inv regress again"
            )
    return result
