"""`inv publish`: dated runs of the site (the report's Markdown, its HTML page, its plots),
earlier ones untouched, an index newest first (`index.html`, and `index.md` as before)."""

import json
import re

import pytest
from report_cases import HOST, record, write_record

from suite.errors import SuiteError
from suite.records import store_host
from suite.reporting.publish import publish
from suite.reporting.report import render_report


def rendered(tmp_path):
    results = tmp_path / "results"
    write_record(results, record("h1", store_host(results, HOST), "aaaa", 10.0, 0.1))
    report_dir = tmp_path / "report"
    render_report(results, report_dir)
    return report_dir


def snapshot(folder):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns) for p in sorted(folder.iterdir())}


def test_publish_keeps_earlier_reports_and_indexes_newest_first(tmp_path):
    report_dir, pub = rendered(tmp_path), tmp_path / "pub"
    first = publish(report_dir, pub, day="2026-11-20").folder
    before = snapshot(first)
    second = publish(report_dir, pub, day="2026-11-21").folder
    third = publish(report_dir, pub, day="2026-11-21").folder
    assert [p.name for p in (first, second, third)] == ["2026-11-20", "2026-11-21", "2026-11-21-2"]
    assert snapshot(first) == before  # bytes and modification times
    assert sorted(before) == ["report.html", "report.md", "throughput.png"]
    index = (pub / "index.md").read_text().splitlines()
    entries = [line for line in index if line.startswith("- [")]
    assert [e.split("]")[0][3:] for e in entries] == ["2026-11-21-2", "2026-11-21", "2026-11-20"]
    assert entries[0].startswith("- [2026-11-21-2](2026-11-21-2/report.md): LMS benchmark report")
    html = (pub / "index.html").read_text()
    pages = re.findall(r'<td><a href="([^"]+)">LMS benchmark report</a>', html)
    assert pages == [f"{d}/report.html" for d in ("2026-11-21-2", "2026-11-21", "2026-11-20")]
    assert 'Latest run: <a href="2026-11-21-2/report.html">2026-11-21-2</a>' in html
    assert sorted(p.name for p in pub.iterdir()) == [
        "2026-11-20",
        "2026-11-21",
        "2026-11-21-2",
        "index.html",
        "index.md",
    ]  # no staging folder or temporary file left behind


def test_a_page_is_the_reports_markdown_with_its_plots_beside_it(tmp_path):
    published = publish(rendered(tmp_path), tmp_path / "pub", day="2026-11-20")
    page = (published.folder / "report.html").read_text()
    assert "<title>LMS benchmark report — 2026-11-20</title>" in page
    assert '<img src="throughput.png" alt="Training throughput' in page
    assert re.search(r"<td[^>]*>10 ± 0.1 \(steps of 1 process\)</td>", page)
    assert '<h2 id="the-answer">The answer</h2>' in page
    assert "http://" not in page and "https://" not in page  # nothing is fetched
    assert published.missing == []


def test_a_run_published_before_pages_stays_as_it_is_and_is_linked_by_its_markdown(tmp_path):
    pub = tmp_path / "pub"
    old = pub / "2026-10-01"
    old.mkdir(parents=True)
    (old / "report.md").write_text("# An old report\n\nGenerated long ago.\n")
    before = snapshot(old)
    publish(rendered(tmp_path), pub, day="2026-11-20")
    assert snapshot(old) == before
    html = (pub / "index.html").read_text()
    assert '<td><a href="2026-10-01/report.md">An old report</a>' in html


def test_a_report_without_its_plots_publishes_and_says_which_are_missing(tmp_path):
    report_dir = rendered(tmp_path)
    (report_dir / "throughput.png").unlink()
    published = publish(report_dir, tmp_path / "pub", day="2026-11-20")
    assert published.missing == ["throughput.png"]
    page = (published.folder / "report.html").read_text()
    assert "Published without 1 plot the page refers to" in page and "<img" not in page
    assert "Plot missing: Training throughput" in page
    assert "without 1 plot" in (tmp_path / "pub" / "index.html").read_text()


def test_publishing_without_a_report_says_what_to_run(tmp_path):
    with pytest.raises(SuiteError, match=r"report.md does not exist: run `inv report` first$"):
        publish(tmp_path / "nothing", tmp_path / "pub")
    assert not (tmp_path / "pub").exists()


def test_a_staging_folder_left_by_a_crash_is_replaced(tmp_path):
    pub = tmp_path / "pub"
    (pub / ".2026-11-20.partial").mkdir(parents=True)
    (pub / ".2026-11-20.partial" / "half.png").write_bytes(b"half")
    folder = publish(rendered(tmp_path), pub, day="2026-11-20").folder
    assert not (folder / "half.png").exists() and not (pub / ".2026-11-20.partial").exists()


def test_the_history_is_rebuilt_from_the_results_and_shown_on_the_index(tmp_path):
    report_dir, pub = rendered(tmp_path), tmp_path / "pub"
    published = publish(report_dir, pub, day="2026-11-20", results_dir=tmp_path / "results")
    assert published.history is None
    assert sorted(p.name for p in (pub / "history").iterdir()) == [
        "history-googlenet.png",
        "history.html",
        "history.json",
        "history.md",
    ]
    html = (pub / "index.html").read_text()
    assert '<img src="history/history-googlenet.png" alt="googlenet: images/sec' in html
    assert '<a href="history/history.html">' in html
    assert not list(pub.glob(".*"))  # the staging folders are gone
    # without results the history stays as it was last built
    publish(report_dir, pub, day="2026-11-21")
    assert '<img src="history/history-googlenet.png"' in (pub / "index.html").read_text()


def test_a_history_that_cannot_be_built_is_one_line_on_the_index(tmp_path):
    (tmp_path / "empty").mkdir()
    published = publish(rendered(tmp_path), tmp_path / "pub", results_dir=tmp_path / "empty")
    assert published.history.startswith(f"no records in {tmp_path / 'empty'}: ")
    html = (tmp_path / "pub" / "index.html").read_text()
    assert f'<p class="gap">no records in {tmp_path / "empty"}: ' in html
    assert not (tmp_path / "pub" / "history").exists()
    # one built before stays, said to be as it was last built
    publish(rendered(tmp_path), tmp_path / "pub", results_dir=tmp_path / "results")
    publish(rendered(tmp_path), tmp_path / "pub", results_dir=tmp_path / "empty")
    html = (tmp_path / "pub" / "index.html").read_text()
    assert "The history was not rebuilt (no records in " in html
    assert "shown as it was last built." in html and '<img src="history/' in html


def test_the_published_history_judges_runs_with_the_gates_settings(tmp_path):
    from history_cases import three_nights

    results = three_nights(tmp_path / "results")  # night 2 is half as fast

    def night_2_verdict(gate, pub):
        publish(rendered(tmp_path / pub), tmp_path / pub, results_dir=results, gate=gate)
        history = json.loads((tmp_path / pub / "history" / "history.json").read_text())
        (series,) = [s for s in history["series"] if s["lms"] == "off"]
        return series["points"][1]["previous"]["verdict"]

    assert night_2_verdict(None, "defaults") == "regression"
    # a gate that counts only changes above 60 % lets a halving pass
    assert night_2_verdict({"tolerance": 0.6, "alpha": 0.002}, "lenient") == "unchanged"
