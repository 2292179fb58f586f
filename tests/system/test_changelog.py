"""CHANGELOG.md holds short release notes: what changed for a user, at most 20 non-empty lines
per entry (its `## ` heading included, "Unreleased" too). How a change was measured, and what
was found on the way, goes to docs/history.md under the issue's section."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 20


def _entries(text: str) -> dict[str, list[str]]:
    """Each `## ` entry's heading: its non-empty lines, heading included."""
    entries = {}
    for entry in re.split(r"(?m)^(?=## )", text)[1:]:
        lines = [line for line in entry.splitlines() if line.strip()]
        entries[lines[0]] = lines
    return entries


def test_every_changelog_entry_is_at_most_20_lines():
    entries = _entries((ROOT / "CHANGELOG.md").read_text())
    assert "## Unreleased" in entries and len(entries) > 1, sorted(entries)
    long = {heading: len(lines) for heading, lines in entries.items() if len(lines) > MAX_LINES}
    assert not long, (
        f"CHANGELOG.md entries over {MAX_LINES} non-empty lines (move the measurements and lab "
        f"notes to docs/history.md, under the issue's section): {long}"
    )


def test_the_count_is_per_entry():
    text = "# Changelog\n\nintro\n\n## Unreleased\n\n- a\n\n## 0.2 — b\n\n- c\n  d\n\n## 0.1\n"
    assert {h: len(lines) for h, lines in _entries(text).items()} == {
        "## Unreleased": 2,
        "## 0.2 — b": 3,
        "## 0.1": 1,
    }
