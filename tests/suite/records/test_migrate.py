"""Every form of schema-1 file the suite wrote (tests/support/records_v1, made by running the
commits that wrote them) loads, migrates to schema 2 with nothing lost, and renders."""

import json
import logging
import shutil
from pathlib import Path

import pytest

from suite.records import (
    SCHEMA_VERSION,
    PredictionRecord,
    SearchRecord,
    TrialRecord,
    load,
    load_host,
    load_predictions,
    load_projections,
    load_searches,
    load_trials,
)

V1 = Path(__file__).resolve().parents[2] / "support" / "records_v1"
FOLDERS = sorted(p.name for p in V1.iterdir() if p.is_dir())


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _without_nulls(values):
    """A stored table as schema 2 compares it: absent and null are the same (not measured)."""
    if isinstance(values, dict):
        return {k: _without_nulls(v) for k, v in values.items() if v is not None}
    if isinstance(values, list):
        return [_without_nulls(v) for v in values]
    return values


def test_the_fixtures_are_schema_1_and_cover_every_kind():
    assert FOLDERS == ["0022d76", "26594da", "6a062dc", "6a062dc-slurm", "ae16893", "cb4b98d"]
    files = [p for p in V1.rglob("*.json*")]
    assert {p.parent.name for p in files} >= {
        "results",
        "searches",
        "predictions",
        "hosts",
        "reports",
    }
    for path in files:
        if path.suffix == ".jsonl" and path.parent.name != "predictions":
            assert {line["schema"] for line in _lines(path)} == {1}, path
    assert all(
        "schema" not in line for p in V1.glob("*/results/predictions/*.jsonl") for line in _lines(p)
    )
    assert all(isinstance(json.loads(p.read_text()), list) for p in V1.glob("*/reports/*.json"))


@pytest.mark.parametrize("folder", FOLDERS)
def test_every_v1_record_loads_typed_and_keeps_what_it_said(folder, caplog):
    results = V1 / folder / "results"
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        trials = load_trials(results)
        searches = load_searches(results)
        predictions = [
            p for f in results.glob("predictions/*.jsonl") for p in load(f, PredictionRecord)
        ]
        hosts = {r.host_ref: load_host(results, r.host_ref) for r in trials}
        projections = load_projections(V1 / folder / "reports")
    assert caplog.messages == []  # nothing skipped
    stored = [line for p in sorted(results.glob("*.jsonl")) for line in _lines(p)]
    assert len(trials) == len(stored) > 0
    for record, values in zip(trials, stored, strict=True):
        written = record.to_dict()
        assert written["schema"] == SCHEMA_VERSION
        # schema 2 adds what older writers lacked, as null; everything else is as stored
        expected = _without_nulls(values)
        traffic = (expected.get("metrics") or {}).get("lms_traffic")
        if traffic is not None:  # lms.SwapTraffic writes the version a version 1 table implied
            traffic.setdefault("version", 1)
        assert _without_nulls({**written, "schema": 1}) == expected
        assert record.params.hash == record.spec_hash  # the params round-trip: the hash holds
    for search in searches:
        assert all(t.repeat == 0 for t in search.trials) or folder == "6a062dc"
    if folder == "26594da":  # before the boundary was measured
        assert searches and all(s.boundary is None for s in searches)
        assert predictions and predictions[0].probes
    if folder == "6a062dc":
        assert {s.boundary.verdict for s in searches} <= {"clear", "confirmed", "uncertain"}
        assert any(r.metrics and r.metrics.workers for r in trials)
        assert any(r.metrics and r.metrics.machine_load for r in trials)
    assert all(h is not None for h in hosts.values())
    if folder in ("cb4b98d", "6a062dc"):
        assert projections and all(link.out_bandwidth for p in projections for link in p.links)
    else:
        assert projections is None


@pytest.mark.parametrize("folder", FOLDERS)
def test_a_v1_results_directory_renders_a_report(folder, tmp_path, caplog):
    from suite.reporting.report import render_report

    results = tmp_path / "results"
    shutil.copytree(V1 / folder / "results", results)
    output = tmp_path / "report"
    if (V1 / folder / "reports").is_dir():
        shutil.copytree(V1 / folder / "reports", output)
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        text = render_report(results, output).read_text()
    assert caplog.messages == []
    assert "description missing" not in text
    for record in load_trials(results):
        assert record.spec_hash in text or record.spec.search is not None
    for search in load_searches(results):
        assert f"max {search.searched}" in text  # the limits table
    if (V1 / folder / "reports").is_dir():
        assert "Projected throughput per link" in text


def test_appending_to_a_v1_file_keeps_its_records_and_adds_schema_2(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(V1 / "0022d76" / "results", results)
    (old,) = load_trials(results)
    from suite.records import append_trial

    append_trial(results, old)  # a resumed run appends to the file an older suite wrote
    first, second = load_trials(results)
    assert first == second == old
    assert [line["schema"] for line in _lines(results / "v1host.jsonl")] == [1, 2]


def test_searches_and_predictions_are_found_by_host(tmp_path):
    results = V1 / "6a062dc" / "results"
    assert load_searches(results, "v1host") == load_searches(results)
    assert [p.search_hash for p in load_predictions(results, "v1host")] == [
        s.search_hash for s in load_searches(results)
    ]
    assert all(
        isinstance(s, SearchRecord)
        for s in load(results / "searches" / "v1host.jsonl", SearchRecord)
    )
    assert all(isinstance(r, TrialRecord) for r in load_trials(results))
