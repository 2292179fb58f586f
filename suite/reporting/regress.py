"""The regression gate of scheduled runs: `inv baseline` accepts results, `inv regress` compares
the newest run against them (DESIGN.md §4).

A baseline holds, per host and spec hash, the per-step images/sec of an accepted run. A change is
a regression only when it is beyond a tolerance (default 5 %) *and* significant: the Mann–Whitney
U test on the per-step rates of the two runs (all repeats pooled) gives p < 0.002, asv's
threshold. A trial that trained in the baseline and does not now is a regression whatever its
numbers. Comparisons pair equal spec hashes only.
"""

import json
import statistics
from collections import defaultdict
from pathlib import Path

from tabulate import tabulate

from suite.errors import SuiteError
from suite.records import load_all_records, record_params, utc_now, write_atomic
from suite.stats import mann_whitney_p

BASELINE_VERSION = 1
REGRESSION_FILE = "regression.json"  # beside the report it is shown in
TOLERANCE = 0.05
ALPHA = 0.002


def _rates(record: dict) -> list[float]:
    batch = record_params(record).batch
    return [batch / s for s in (record["metrics"] or {}).get("step_times_s", []) if s > 0]


def newest_runs(records: list[dict]) -> dict:
    """{(host, spec_hash): [records of the newest run]} (a run: records sharing `run`)."""
    grouped = defaultdict(list)
    for record in records:
        grouped[(record["host"], record["spec_hash"])].append(record)
    newest = {}
    for key, group in grouped.items():
        last = max(group, key=lambda r: r["finished_at"])
        run = last.get("run")
        newest[key] = [r for r in group if r.get("run") == run] if run else [last]
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
    for (host, spec_hash), run in sorted(newest_runs(load_all_records(results_dir)).items()):
        ok = [r for r in run if r["outcome"] == "ok"]
        if not ok:
            continue
        rates = [rate for r in ok for rate in _rates(r)]
        entries[f"{host}/{spec_hash}"] = {
            "host": host,
            "spec_hash": spec_hash,
            "workload": record_params(ok[0]).workload,
            "resolution": record_params(ok[0]).resolution,
            "batch": record_params(ok[0]).batch,
            "run": ok[0].get("run"),
            "repeats": len(ok),
            "images_per_sec": statistics.fmean(rates),
            "step_rates": rates,
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
    if baseline.get("version") != BASELINE_VERSION or "entries" not in baseline:
        raise SuiteError(f"baseline {path}: version {baseline.get('version')!r}; this suite "
                         f"reads version {BASELINE_VERSION}")  # fmt: skip
    return baseline


def compare(baseline: dict, results_dir: Path, tolerance=TOLERANCE, alpha=ALPHA) -> list[dict]:
    """One row per baseline entry: the newest run's change, p-value and verdict."""
    runs = newest_runs(load_all_records(results_dir))
    rows = []
    for key, entry in sorted(baseline["entries"].items()):
        row = {k: entry[k] for k in ("host", "workload", "resolution", "batch")}
        row.update(key=key, baseline=entry["images_per_sec"], now=None, change=None, p=None)
        run = runs.get((entry["host"], entry["spec_hash"]))
        if not run or run[0].get("run") == entry["run"]:
            row["verdict"] = "no new run"
        elif not any(r["outcome"] == "ok" for r in run):
            row["verdict"] = "regression"
            row["reason"] = f"did not train: {run[0]['outcome']}"
        else:
            rates = [rate for r in run if r["outcome"] == "ok" for rate in _rates(r)]
            now = statistics.fmean(rates)
            change = now / entry["images_per_sec"] - 1
            p = mann_whitney_p(entry["step_rates"], rates)
            row.update(now=now, change=change, p=p)
            significant = p < alpha and abs(change) > tolerance
            row["verdict"] = ("regression" if change < 0 else "improvement") if significant else (
                "unchanged")  # fmt: skip
        rows.append(row)
    return rows


def table(rows: list[dict]) -> str:
    def fmt(value, pattern):
        return "—" if value is None else pattern.format(value)

    body = [
        [r["host"], f"{r['workload']} {r['resolution']}px b{r['batch']}",
         fmt(r["baseline"], "{:.3g}"), fmt(r["now"], "{:.3g}"), fmt(r["change"], "{:+.1%}"),
         fmt(r["p"], "{:.2g}"), r["verdict"] + (f" ({r['reason']})" if r.get("reason") else "")]
        for r in rows
    ]  # fmt: skip
    headers = ["host", "workload", "baseline img/s", "now img/s", "change", "p", "verdict"]
    return tabulate(body, headers, tablefmt="github", disable_numparse=True)


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
            raise SuiteError(f"{path}: field {name!r} is missing or has the wrong type; "
                             "run inv regress again")  # fmt: skip
    for index, row in enumerate(result["rows"]):
        if not isinstance(row, dict) or not {"host", "workload", "verdict"} <= set(row):
            raise SuiteError(f"{path}: rows[{index}] lacks host, workload or verdict; "
                             "run inv regress again")  # fmt: skip
    return result
