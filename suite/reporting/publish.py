"""`inv publish`: a static site. Each run is a dated folder holding the rendered report (its
Markdown, the source, and the HTML page made from it) and its plots; the index (`index.html`,
and `index.md` as before) lists every run newest first. A run's folder is written once, into a
hidden staging folder renamed into place, and never touched again: only the index is rewritten,
each file replaced whole."""

import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from suite.errors import SuiteError
from suite.records import utc_now, write_atomic
from suite.reporting.pages import index_html, render_markdown, run_html, section

_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(\d+))?$")
SITE_TITLE = "LMS benchmark results"
# the newest run's sections the index shows first
LATEST_SECTIONS = ("The answer", "Regression check")


@dataclass
class Published:
    """What `publish` wrote: the run's folder, the plots its report lacked, the index page."""

    folder: Path
    missing: list[str]
    index: Path


@dataclass
class Run:
    """A published run as the index lists it."""

    name: str
    href: str  # its page, or its Markdown where it was published before there were pages
    markdown: str
    title: str
    summary: str
    missing: list[str]


def _published(publish_dir: Path) -> list[Path]:
    def order(path: Path):
        day, number = _DATED.match(path.name).groups()
        return day, int(number or 1)

    dirs = [p for p in publish_dir.iterdir() if p.is_dir() and _DATED.match(p.name)]
    return sorted(dirs, key=order, reverse=True)


def _title(report: Path) -> str:
    for line in report.read_text().splitlines():
        if line.startswith("# "):
            return line[2:].strip()
    return report.parent.name


def _runs(publish_dir: Path) -> list[Run]:
    runs = []
    for folder in _published(publish_dir):
        report = folder / "report.md"
        if not report.exists():
            continue
        page = render_markdown(report.read_text(), folder)
        has_page = (folder / "report.html").exists()
        runs.append(
            Run(
                name=folder.name,
                href=f"{folder.name}/report.{'html' if has_page else 'md'}",
                markdown=f"{folder.name}/report.md",
                title=page.title or folder.name,
                summary=page.summary,
                missing=page.missing,
            )
        )
    return runs


def _latest(publish_dir: Path, run: Run | None) -> dict | None:
    """The newest run's answer and regression sections, shown first on the index."""
    if run is None:
        return None
    text = (publish_dir / run.markdown).read_text()
    parts = [s for s in (section(text, h) for h in LATEST_SECTIONS) if s]
    excerpt = None
    if parts:
        folder = publish_dir / run.name
        excerpt = render_markdown("\n".join(parts), folder, f"{run.name}/", 1).body
    return {**vars(run), "excerpt": excerpt}


def write_index(publish_dir: Path, history: str = "") -> Path:
    """Rewrite `index.md` (links to each run's Markdown) and `index.html` (the site's front
    page: the newest run's answer, the history, every run); returns the HTML index."""
    runs = _runs(publish_dir)
    lines = ["# Published LMS benchmark reports", "", "Newest first.", ""]
    lines += [f"- [{run.name}]({run.markdown}): {run.title}" for run in runs]
    write_atomic(publish_dir / "index.md", "\n".join(lines) + "\n")
    if not history:
        history = "<p>No history yet.</p>"
    page = index_html(
        SITE_TITLE, runs, _latest(publish_dir, runs[0] if runs else None), history, utc_now()
    )
    index = publish_dir / "index.html"
    write_atomic(index, page)
    return index


def publish(report_dir: Path, publish_dir: Path, day: str | None = None) -> Published:
    """Copy report.md and its PNGs to publish_dir/<day>[-n]/ with the report's HTML page;
    rewrite the index."""
    report = Path(report_dir) / "report.md"
    if not report.exists():
        raise SuiteError(f"{report} does not exist: run `inv report` first")
    publish_dir = Path(publish_dir)
    publish_dir.mkdir(parents=True, exist_ok=True)
    day = day or datetime.now(UTC).strftime("%Y-%m-%d")
    target, number = publish_dir / day, 1
    while target.exists():
        number += 1
        target = publish_dir / f"{day}-{number}"
    staging = publish_dir / f".{target.name}.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    for item in [report, *sorted(Path(report_dir).glob("*.png"))]:
        shutil.copy2(item, staging / item.name)
    page = render_markdown(report.read_text(), staging)
    (staging / "report.html").write_text(run_html(page, target.name, utc_now()))
    staging.rename(target)  # a reader never sees a half-copied report
    return Published(target, page.missing, write_index(publish_dir))
