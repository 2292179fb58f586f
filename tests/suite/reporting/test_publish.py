"""`inv publish`: dated copies of the report, earlier ones untouched, an index newest first."""

import pytest
from report_cases import HOST, record, write_record

from suite.errors import SuiteError
from suite.records import store_host
from suite.reporting.publish import publish
from suite.reporting.report import render_report


def test_publish_keeps_earlier_reports_and_indexes_newest_first(tmp_path):
    results = tmp_path / "results"
    write_record(results, record("h1", store_host(results, HOST), "aaaa", 10.0, 0.1))
    report_dir = tmp_path / "report"
    render_report(results, report_dir)
    first = publish(report_dir, tmp_path / "pub", day="2026-11-20")
    second = publish(report_dir, tmp_path / "pub", day="2026-11-21")
    third = publish(report_dir, tmp_path / "pub", day="2026-11-21")
    assert [p.name for p in (first, second, third)] == ["2026-11-20", "2026-11-21", "2026-11-21-2"]
    assert (first / "report.md").exists() and list(first.glob("*.png"))
    index = (tmp_path / "pub" / "index.md").read_text().splitlines()
    entries = [line for line in index if line.startswith("- [")]
    assert [e.split("]")[0][3:] for e in entries] == ["2026-11-21-2", "2026-11-21", "2026-11-20"]
    with pytest.raises(SuiteError, match="inv report"):
        publish(tmp_path / "nothing", tmp_path / "pub")
