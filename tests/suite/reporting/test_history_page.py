"""The history's files: the page names every run, its numbers with intervals, the verdicts, the
limits and what changed; the JSON holds the same; one plot per workload; and a missing
description is said on the page."""

import json

from history_cases import three_nights

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
