"""The regression gate on hand-made records: a real slowdown is caught, noise is not, a trial that
stops training is a regression, and the report gets the section."""

import json
import math
import random
import subprocess
from pathlib import Path

import pytest
from report_cases import HOST, record, write_record

from suite.errors import SuiteError
from suite.records import SCHEMA_VERSION, store_host
from suite.reporting.baseline import load_baseline, make_baseline
from suite.reporting.regress import compare, table, write_regression
from suite.reporting.report import render_report
from suite.specs import load_spec

ROOT = Path(__file__).resolve().parents[3]
PARAMS = record("h", "r", "x", 1.0, 0.1)["params"]
SMOKE_OFF, SMOKE_ON = (t.params.to_dict() for t in load_spec("smoke").trials[:2])


def run_records(
    host,
    run,
    spec_hash,
    seconds_per_step,
    seed,
    repeats=3,
    outcome="ok",
    day=1,
    given_rates=None,
    machine=None,
    params=PARAMS,
):
    """A run's records, one per trial process: images/sec around 2 / `seconds_per_step` (3 %
    noise between processes), or `given_rates`; `machine`: the machine speed each measured."""
    rng = random.Random(seed)
    records = []
    noisy = [2 / (seconds_per_step or 1) * math.exp(rng.gauss(0, 0.03)) for _ in range(repeats)]
    rates = given_rates or noisy
    for repeat, rate in enumerate(rates):
        ok = outcome == "ok"
        metrics = {"images_per_sec": {"mean": rate, "stderr": 0.0}}
        if machine is not None:
            speed = machine[repeat % len(machine)]
            metrics["machine_speed"] = {"before": speed, "after": speed, "mean": speed}
        records.append(
            {
                "schema": SCHEMA_VERSION,
                "spec": {"name": "s", "study": "a", "source": "s.toml"},
                "spec_hash": spec_hash,
                "params": params,
                "repeat": repeat,
                "host": host,
                "host_ref": "ref",
                "outcome": outcome,
                "metrics": metrics if ok else None,
                "error": None if ok else "OOM",
                "device": "CPU:0",
                "started_at": f"2026-11-{day:02d}T00:00:00+00:00",
                "finished_at": f"2026-11-{day:02d}T00:10:0{repeat}+00:00",
                "wall_s": 1.0,
                "run": run,
            }
        )
    return records


def write(results, records):
    for one in records:
        write_record(results, one)


@pytest.fixture
def accepted(tmp_path):
    results = tmp_path / "results"
    store_host(results, HOST)
    write(results, run_records("h1", "base", "aaaa", 0.100, seed=1, params=SMOKE_OFF))
    write(results, run_records("h1", "base", "bbbb", 0.200, seed=2, params=SMOKE_ON))
    write(results, run_records("h2", "base", "aaaa", 0.050, seed=3, params=SMOKE_OFF))
    baseline = make_baseline(results, tmp_path / "baseline.json")
    assert len(baseline.entries) == 3
    return results, tmp_path / "baseline.json"


def test_a_real_slowdown_is_caught_and_noise_is_not(accepted):
    results, path = accepted
    write(results, run_records("h1", "new", "aaaa", 0.120, seed=11, day=2))  # 17 % slower
    write(results, run_records("h1", "new", "bbbb", 0.201, seed=12, day=2))  # noise
    rows = {r.key: r for r in compare(load_baseline(path), results)}
    slow, noise, untouched = rows["h1/aaaa"], rows["h1/bbbb"], rows["h2/aaaa"]
    assert slow.verdict == "regression" and slow.change == pytest.approx(-1 / 6, abs=0.03)
    assert slow.p < 0.002
    assert noise.verdict == "unchanged" and abs(noise.change) < 0.05
    assert untouched.verdict == "no new run"


def test_a_trial_that_stops_training_is_a_regression_and_improvements_are_named(accepted):
    results, path = accepted
    write(results, run_records("h1", "new", "aaaa", 0, seed=0, outcome="out_of_memory", day=2))
    write(results, run_records("h2", "new", "aaaa", 0.040, seed=13, day=2))
    rows = {r.key: r for r in compare(load_baseline(path), results)}
    assert rows["h1/aaaa"].verdict == "regression"
    assert "out_of_memory" in rows["h1/aaaa"].reason
    assert rows["h2/aaaa"].verdict == "improvement"


def test_inv_regress_exits_non_zero_and_the_report_shows_it(accepted, tmp_path):
    results, path = accepted
    write(results, run_records("h1", "new", "aaaa", 0.130, seed=21, day=2))
    command = [
        str(ROOT / "inv"),
        "regress",
        "--results",
        str(results),
        "--baseline",
        str(path),
        "--output",
        str(tmp_path / "report"),
    ]
    completed = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    assert completed.returncode == 1, completed.stdout + completed.stderr
    assert "regression" in completed.stdout and "1 regression(s)" in completed.stderr
    # LMS off and on of one size are two rows that say which is which
    cells = [[c.strip() for c in line.split("|")[1:4]] for line in completed.stdout.splitlines()]
    assert cells[0] == ["host", "configuration", "LMS"]
    assert ["h1", "googlenet 224px b4", "off"] in cells
    assert [
        "h1",
        "googlenet 224px b4",
        "on (swapout_threshold 1, swapin_ahead 1, swapin_groupby 0, sync_mode 0)",
    ] in cells
    report = render_report(results, tmp_path / "report").read_text()
    assert "## Regression check" in report and "**1 regression(s)**" in report


def gate(
    accepted,
    now_rates,
    base_rates,
    tolerance=0.05,
    alpha=0.002,
    now_machine=None,
    base_machine=None,
    spec_hash="cccc",
):
    """The verdict on h1/`spec_hash`: a baseline run of processes with `base_rates`, a new one
    with `now_rates` (and the machine speeds each process measured, if given)."""
    results, path = accepted
    write(
        results,
        run_records("h1", "base", spec_hash, 0, 0, given_rates=base_rates, machine=base_machine),
    )
    baseline = make_baseline(results, path)
    write(
        results,
        run_records(
            "h1", "new", spec_hash, 0, 0, given_rates=now_rates, day=2, machine=now_machine
        ),
    )
    rows = {r.key: r for r in compare(baseline, results, tolerance, alpha)}
    return rows[f"h1/{spec_hash}"]


STEADY = [10.0, 10.1, 9.9, 10.05, 9.95]


def test_a_significant_change_within_the_tolerance_is_not_a_regression(accepted):
    row = gate(accepted, [r * 0.97 for r in STEADY], STEADY)  # 3 % slower, every process
    assert row.p < 0.002 and row.change == pytest.approx(-0.03, rel=1e-6)
    assert row.verdict == "unchanged" and "within 5%" in row.reason


def test_a_change_beyond_the_tolerance_that_noise_explains_is_not_a_regression(accepted):
    """Geometric means 8 % apart, but the processes scatter by a factor of two."""
    row = gate(accepted, [5.5, 14.0, 9.0], [6.0, 15.0, 10.0])
    assert row.change < -0.05 and row.p > 0.1
    assert row.verdict == "unchanged"


@pytest.mark.parametrize("tolerance, verdict", [(0.05, "regression"), (0.10, "unchanged")])
def test_the_tolerance_decides_a_significant_eight_percent_slowdown(accepted, tolerance, verdict):
    row = gate(accepted, [r * 0.92 for r in STEADY], STEADY, tolerance=tolerance)
    assert row.change == pytest.approx(-0.08, rel=1e-6) and row.p < 0.002
    assert row.verdict == verdict


@pytest.mark.parametrize("alpha, verdict", [(0.002, "unchanged"), (0.05, "regression")])
def test_alpha_decides_a_weakly_significant_slowdown(accepted, alpha, verdict):
    """Three processes a side, 23 % slower but noisy: p between the two thresholds."""
    base = [10.0, 10.8, 9.2]
    row = gate(accepted, [r / 1.3 for r in [10.2, 11.0, 9.3]], base, alpha=alpha)
    assert 0.002 < row.p < 0.05 and row.change < -0.05
    assert row.verdict == verdict


def test_a_busy_machine_is_not_taken_for_a_slower_suite(accepted):
    """The same suite rerun while the machine was busy: every process 40 % slower, and so was the
    machine's product chain around it. As measured a regression, per machine speed unchanged: no
    verdict. Without the machine's speed (records from before it was measured) it would be called
    a regression, as the +49 % 'improvement' was."""
    busy, quiet = [6.0, 6.1, 5.9], [10.0, 10.1, 9.9]
    machine_now, machine_then = [60.0, 61.0, 59.5], [100.0, 101.0, 99.0]
    row = gate(accepted, busy, quiet, now_machine=machine_now, base_machine=machine_then)
    assert row.machine == pytest.approx(0.6, abs=0.01) and row.verdict == "inconclusive"
    assert "0.60x its baseline speed; -40% as measured, -0% per machine speed" in row.reason
    raw = gate(accepted, busy, quiet, spec_hash="dddd")  # without the machine's speed: as they are
    assert raw.machine is None and raw.verdict == "regression"
    # a real slowdown holds both ways, whatever the machine did: still found
    real = gate(
        accepted,
        [r * 0.5 for r in busy],
        quiet,
        now_machine=machine_now,
        base_machine=machine_then,
        spec_hash="eeee",
    )
    assert real.verdict == "regression" and real.change == pytest.approx(-0.7, abs=0.02)


def test_one_process_a_side_is_inconclusive(accepted):
    row = gate(accepted, [5.0], [10.0])
    assert row.verdict == "inconclusive" and "repeats >= 3" in row.reason
    assert row.change == pytest.approx(-0.5)


def test_bad_baselines_get_clear_errors(tmp_path):
    with pytest.raises(SuiteError, match="does not exist"):
        load_baseline(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SuiteError, match="not valid JSON"):
        load_baseline(tmp_path / "bad.json")
    with pytest.raises(SuiteError, match=f"baseline {tmp_path}: cannot read it \\(Is a directory"):
        load_baseline(tmp_path)
    with pytest.raises(SuiteError, match="no trained records"):
        make_baseline(tmp_path / "empty", tmp_path / "b.json")
    assert write_regression([], tmp_path / "out", 0.05, 0.002).exists()
    # an entry without its processes: compare could not weigh it (it was a KeyError there)
    entry = {
        "host": "h1",
        "spec_hash": "aaaa",
        "workload": "googlenet",
        "resolution": 224,
        "batch": 4,
        "images_per_sec": 10.0,
    }
    damaged = {"version": 2, "accepted_at": "2026-11-01", "entries": {"h1/aaaa": entry}}
    (tmp_path / "damaged.json").write_text(json.dumps(damaged))
    with pytest.raises(SuiteError, match=r"'entries.h1/aaaa.processes'.*`inv baseline`"):
        load_baseline(tmp_path / "damaged.json")


def test_a_damaged_regression_file_is_one_clear_error(tmp_path):
    from suite.reporting.regress import load_regression

    assert load_regression(tmp_path) is None
    (tmp_path / "regression.json").write_text('{"checked_at": "x", "rows": []}')
    with pytest.raises(SuiteError, match="regression.json: field 'tolerance' is missing"):
        load_regression(tmp_path)
    (tmp_path / "regression.json").write_text("{")
    with pytest.raises(SuiteError, match="not valid JSON"):
        load_regression(tmp_path)
    checked = {"checked_at": "x", "tolerance": 0.05, "alpha": 0.002}
    (tmp_path / "regression.json").write_text(json.dumps(checked | {"rows": [{"host": "h1"}]}))
    with pytest.raises(SuiteError, match="lacks required field 'rows.0.workload'"):
        load_regression(tmp_path)


def test_a_regression_file_from_before_rows_named_their_configuration_renders(tmp_path):
    """Rows written before `lms` and `configuration` (issue 27) show as they are."""
    old = {
        "host": "h1",
        "workload": "googlenet",
        "resolution": 224,
        "batch": 4,
        "key": "h1/a",
        "baseline": 10.0,
        "now": 8.0,
        "change": -0.2,
        "p": 0.001,
        "interval": [-0.3, -0.1],
        "machine": None,
        "processes": [3, 3],
        "verdict": "regression",
    }
    payload = {"checked_at": "2026-11-01T00:00:00+00:00", "tolerance": 0.05, "alpha": 0.002}
    (tmp_path / "regression.json").write_text(json.dumps(payload | {"rows": [old]}))
    (tmp_path / "results").mkdir()
    report = render_report(tmp_path / "results", tmp_path).read_text()
    row = "| h1     | googlenet 224px b4 | —     | 10               | 8           | —"
    assert "**1 regression(s)**" in report and row in report
    assert "-20.0% (-30% to -10%) | 0.001 | 3/3" in report


def test_the_table_tells_every_configuration_apart(tmp_path):
    """Issue 27: two "googlenet 224px b4" rows and no LMS column. Each row says LMS off or on
    (with its settings and emulated link), and rows that would still read the same name every
    parameter in which they differ."""
    link_2, link_8 = (t.params.to_dict() for t in load_spec("link-emulated").trials[2:4])
    fp16 = load_spec("smoke", {"precision": "fp16"}).trials[0].params.to_dict()
    careful = {**SMOKE_ON, "lms": {**SMOKE_ON["lms"], "safety_ratio": 0.8}, "steps": 20}
    configurations = [SMOKE_OFF, SMOKE_ON, link_2, link_8, fp16, careful]
    results = tmp_path / "results"
    for seed, params in enumerate(configurations):
        write(results, run_records("h1", "base", f"hash{seed}", 0.1, seed, params=params))
    rows = compare(make_baseline(results, tmp_path / "baseline.json"), results)
    named = {r.key: (r.configuration, r.lms) for r in rows}
    everything = "on (swapout_threshold 1, swapin_ahead 1, swapin_groupby 0, sync_mode 0"
    assert named == {
        "h1/hash0": ("googlenet 224px b4 precision=fp32", "off"),
        "h1/hash1": ("googlenet 224px b4 lms.safety_ratio=0.9 steps=8", everything + ")"),
        "h1/hash2": ("googlenet 224px b4", everything + ", 2 GB/s, 10 us emulated link)"),
        "h1/hash3": ("googlenet 224px b4", everything + ", 8 GB/s, 10 us emulated link)"),
        "h1/hash4": ("googlenet 224px b4 precision=fp16", "off"),
        "h1/hash5": ("googlenet 224px b4 lms.safety_ratio=0.8 steps=20", everything + ")"),
    }
    printed = table(rows).splitlines()[2:]
    assert len({tuple(line.split("|")[1:4]) for line in printed}) == len(configurations)


def test_rows_alike_in_every_parameter_are_told_apart_by_their_spec_hash(accepted):
    """Hashes differ over the same parameters only in hand-made or other suites' records."""
    results, path = accepted
    write(results, run_records("h2", "base", "ffff", 0.050, seed=4, params=SMOKE_OFF))
    rows = compare(make_baseline(results, path), results)
    alike = sorted(r.configuration for r in rows if r.host == "h2")
    assert alike == ["googlenet 224px b4 [aaaa]", "googlenet 224px b4 [ffff]"]
