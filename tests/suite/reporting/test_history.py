"""The history on hand-made runs with known numbers: a point per run with its between-process
interval, the gate's verdict against the run before and the baseline, limits per run, what
changed where; and bad input: schema-1 runs mixed in, a missing host description, no records."""

import json
import shutil
from pathlib import Path

import pytest
from history_cases import RUNS, described, night_records, night_searches, three_nights
from report_cases import write_record

from suite.errors import SuiteError
from suite.records import store_host
from suite.reporting.baseline import make_baseline
from suite.reporting.history import build_history, interval

V1 = Path(__file__).resolve().parents[2] / "support" / "records_v1"


def test_a_point_is_the_geometric_mean_with_a_t_interval_between_processes():
    rate, low, high = interval([10.0, 10.2, 9.9])
    assert rate == pytest.approx((10.0 * 10.2 * 9.9) ** (1 / 3))
    # t(0.975, 2) = 4.303; sd of the logs 0.01519, / sqrt(3)
    assert (low, high) == pytest.approx((rate / 1.0386, rate * 1.0386), rel=1e-3)
    assert interval([7.0]) == (pytest.approx(7.0), None, None)  # one process: no interval


def test_three_runs_with_a_regression_and_a_tensorflow_change(tmp_path):
    history = build_history(three_nights(tmp_path / "results"))
    assert [run.key for run in history.runs] == list(RUNS)
    off, on = history.series
    assert (off.lms, on.lms) == ("off", "on (auto-tuned)")
    assert [p.run for p in off.points] == list(RUNS)
    assert [p.processes for p in off.points] == [3, 3, 3]
    assert off.points[1].rate == pytest.approx(off.points[0].rate / 2)
    assert [p.previous.verdict for p in off.points] == ["first run", "regression", "improvement"]
    assert off.points[1].previous.change == pytest.approx(-0.5)
    assert [p.previous.verdict for p in on.points] == ["first run", "unchanged", "unchanged"]
    assert all(p.baseline is None for p in off.points)
    # the measured bandwidth differs every night: no change; TensorFlow did, on night 3
    assert [(c.run, c.label) for c in history.changes] == [(RUNS[2], "TensorFlow 2.21.0 → 2.22.0")]
    limits = [(lim.run, lim.mode, lim.largest_ok) for lim in history.limits]
    assert limits == [
        (RUNS[0], "off", 4),
        (RUNS[1], "off", 4),
        (RUNS[2], "off", 4),
        (RUNS[0], "on", 8),
        (RUNS[1], "on", 8),
        (RUNS[2], "on", 9),
    ]
    assert history.notes == ()
    json.dumps(history.to_dict())  # the page's data is plain JSON


def test_each_run_against_the_baseline(tmp_path):
    results = tmp_path / "results"
    for value in night_records(0, "ref"):
        write_record(results, value)
    make_baseline(results, tmp_path / "baseline.json")
    three_nights(results, host="h2")  # other host: no entry in the baseline
    for value in night_records(1, "ref", slower=2.0):
        write_record(results, value)
    history = build_history(results, tmp_path / "baseline.json")
    h1_off = next(s for s in history.series if s.host == "h1" and s.lms == "off")
    assert [p.baseline.verdict for p in h1_off.points] == ["baseline", "regression"]
    assert all(p.baseline is None for s in history.series if s.host == "h2" for p in s.points)


def test_schema_1_runs_mixed_with_new_ones_and_a_missing_description(tmp_path):
    results = three_nights(tmp_path / "results", host="v1host")
    for old in ("0022d76", "26594da", "6a062dc"):
        for path in (V1 / old / "results").rglob("*.json*"):
            target = results / path.relative_to(V1 / old / "results")
            target.parent.mkdir(parents=True, exist_ok=True)
            with open(target, "a") as out:
                out.write(path.read_text())
    night1 = json.loads((results / "v1host.jsonl").read_text().splitlines()[0])["host_ref"]
    (results / "hosts" / f"{night1}.json").unlink()
    history = build_history(results)
    days = [run for run in history.runs if run.legacy]
    assert [run.key for run in days] == ["day:v1host:2026-11-25"]  # 0022d76 and 26594da
    assert set(RUNS) < {run.key for run in history.runs}
    notes = "\n".join(history.notes)
    assert "1 run(s) grouped by host and day, their records having no run id" in notes
    assert f"{history.runs[0].label} on v1host: host description missing" in notes
    # the oldest schema-1 description lacks fields the newer ones have: told, not a change
    labels = [c.label for c in history.changes]
    assert "TensorFlow 2.21.0 → 2.22.0" in labels


def test_no_records_is_one_line(tmp_path):
    with pytest.raises(SuiteError, match="no records in .*: nothing to show a history of"):
        build_history(tmp_path)
    with pytest.raises(SuiteError, match="does not exist: run `inv run` first"):
        build_history(tmp_path / "missing")
    shutil.rmtree(tmp_path)


def test_searches_without_trials_are_a_day_of_their_own(tmp_path):
    results = tmp_path / "results"
    ref = store_host(results, described())
    for value in night_searches(0, ref) + night_searches(1, ref):
        write_record(results, value)
    history = build_history(results)
    assert [run.key for run in history.runs] == ["day:h1:2026-11-01", "day:h1:2026-11-02"]
    assert [lim.started_at for lim in history.limits if lim.mode == "on"] == [
        "2026-11-01T02:40:00+00:00",
        "2026-11-02T02:40:00+00:00",
    ]
    assert history.series == () and history.changes == ()
    assert history.notes[0].startswith("2 run(s) grouped by host and day")


def test_days_without_run_ids_compare_as_runs(tmp_path):
    results = tmp_path / "results"
    for night, slower in ((0, 1.0), (1, 2.0)):
        for value in night_records(night, "ref", slower=slower):
            write_record(results, {**value, "run": None})
    off = build_history(results).series[0]
    assert [p.run for p in off.points] == ["day:h1:2026-11-01", "day:h1:2026-11-02"]
    assert [p.previous.verdict for p in off.points] == ["first run", "regression"]


def test_a_run_after_runs_that_did_not_train(tmp_path):
    results = tmp_path / "results"
    for night in range(2):
        for value in night_records(night, "ref"):
            if night == 0:
                value |= {"outcome": "crashed", "metrics": None, "error": "boom"}
            write_record(results, value)
    off = build_history(results).series[0]
    assert [p.previous.verdict for p in off.points] == ["first run", "no earlier run trained"]
    assert [p.outcomes for p in off.points] == ["3 crashed", "3 ok"]
