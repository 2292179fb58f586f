"""The history's files: the page names every run, its numbers with intervals, the verdicts, the
limits and what changed; the JSON holds the same; one plot per workload; and a missing
description is said on the page."""

import copy
import json

from history_cases import RUNS, described, night_records, three_nights
from report_cases import write_record

from suite.records import store_host
from suite.reporting.history import build_history
from suite.reporting.history_page import write_history


def test_the_page_the_data_and_the_plot(tmp_path):
    history = build_history(three_nights(tmp_path / "results"))
    files = write_history(history, tmp_path / "history")
    assert files.page == tmp_path / "history" / "history.md"
    assert [(p.workload, p.path) for p in files.plots] == [("googlenet", "history-googlenet.png")]
    assert (tmp_path / "history" / "history-googlenet.png").read_bytes()[:4] == b"\x89PNG"
    assert files.lines() == [
        f"history: {files.page}",
        f"history data: {files.data}",
        f"history plot: {tmp_path / 'history' / 'history-googlenet.png'} (googlenet)",
    ]
    page = files.page.read_text()
    assert "records of 3 runs" in page
    assert "| 2026-11-03 02:30 (night3cc) | h1     | TensorFlow 2.21.0 → 2.22.0 |" in page
    assert "![googlenet: images/sec per run (95 % interval between processes)]" in page
    assert "10 (9.66–10.4, 3 processes)" in page  # night 1, LMS off
    assert "regression: -50.0% (" in page  # night 2 against night 1
    assert "| 4         | 9        |" in page  # night 3's limits: LMS off → on
    assert "What is missing" not in page
    data = json.loads(files.data.read_text())
    assert [run["label"] for run in data["runs"]] == [run.label for run in history.runs]
    assert data["changes"][0]["label"] == "TensorFlow 2.21.0 → 2.22.0"


def test_a_missing_description_is_said_on_the_page(tmp_path):
    results = three_nights(tmp_path / "results")
    for path in (results / "hosts").glob("*.json"):
        path.unlink()
    files = write_history(build_history(results), tmp_path / "history")
    page = files.page.read_text()
    assert "## What is missing" in page
    assert "run 2026-11-02 02:30 (night2bb) on h1: host description missing" in page
    assert "What changed between runs" not in page


def test_two_workloads_have_their_series_and_a_plot_each(tmp_path):
    """GoogLeNet's three nights and a 3D U-Net measured beside it the same nights: series by
    workload, each through every run, and a plot per workload (tests/system/test_nightly.py runs
    the chain on one workload: this is where two are held)."""
    results = tmp_path / "results"
    for night in range(3):
        ref = store_host(results, described("2.22.0" if night == 2 else "2.21.0", 10.0 + night))
        slower = 2.0 if night == 1 else 1.0
        for value in night_records(night, ref, slower=slower):
            write_record(results, value)
            unet = copy.deepcopy(value)
            unet["spec_hash"] = f"unet3d-{value['spec_hash']}"
            unet["params"].update(workload="unet3d", resolution=16, batch=1)
            write_record(results, unet)
    history = build_history(results)
    assert [(s.workload, s.lms) for s in history.series] == [
        ("googlenet", "off"),
        ("googlenet", "on (auto-tuned)"),
        ("unet3d", "off"),
        ("unet3d", "on (auto-tuned)"),
    ]
    for series in history.series:
        assert [p.run for p in series.points] == list(RUNS)
    verdicts = {(s.workload, s.lms): s.points[1].previous.verdict for s in history.series}
    assert verdicts[("unet3d", "off")] == verdicts[("googlenet", "off")] == "regression"
    files = write_history(history, tmp_path / "history")
    assert [(p.workload, p.path) for p in files.plots] == [
        ("googlenet", "history-googlenet.png"),
        ("unet3d", "history-unet3d.png"),
    ]
    for plot in files.plots:
        assert (tmp_path / "history" / plot.path).read_bytes()[:4] == b"\x89PNG"
    page = files.page.read_text()
    assert "![googlenet: images/sec per run" in page and "![unet3d: images/sec per run" in page
