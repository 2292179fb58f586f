"""The scheduled chain (scheduled/nightly.sh) runs end to end on the smoke spec, natively: run,
baseline on first use, regress, report, publish; a second night finds nothing new and passes."""

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]


def test_nightly_chain_on_the_smoke_spec(tmp_path):
    env = {
        **os.environ,
        "LMS_SPEC": "smoke",
        "LMS_HOSTS": "",  # natively: the container path is covered by test_containers.py
        "LMS_RESULTS": str(tmp_path / "results"),
        "LMS_REPORTS": str(tmp_path / "report"),
        "LMS_PUBLISH": str(tmp_path / "published"),
        "LMS_BASELINE": str(tmp_path / "baseline.json"),
    }
    for night in (1, 2):
        completed = subprocess.run([str(ROOT / "scheduled" / "nightly.sh")], cwd=ROOT, env=env,
                                   capture_output=True, text=True, timeout=1800)  # fmt: skip
        output = completed.stdout[-3000:] + completed.stderr[-3000:]
        assert completed.returncode == 0, (night, output)
    assert (tmp_path / "baseline.json").exists()
    report = (tmp_path / "report" / "report.md").read_text()
    assert "## Regression check" in report and "No regression" in report
    index = (tmp_path / "published" / "index.md").read_text()
    assert index.count("- [") == 2
