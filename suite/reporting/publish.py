"""`inv publish`: a static site. Each run is a dated folder holding the rendered report (its
Markdown, the source, and the HTML page made from it) and its plots; `history/` holds the history
of every stored run (suite.reporting.history: its Markdown, page, data and one plot per
workload); the index (`index.html`, and `index.md` as before) shows the newest run's answer, the
history's plots and every run, newest first. A run's folder is written once, into a hidden
staging folder renamed into place, and never touched again. The history is rebuilt in a staging
folder too and swapped in by two renames; the index files are each replaced whole."""

import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from suite.errors import SuiteError
from suite.records import readable_directory, utc_now, writable_directory, write_atomic
from suite.reporting.pages import index_html, page_html, render_markdown, section

_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(\d+))?$")
HISTORY = "history"
SITE_TITLE = "LMS benchmark results"
# the newest run's sections the index shows first
LATEST_SECTIONS = ("The answer", "Regression check")


@dataclass
class Published:
    """What `publish` wrote: the run's folder, the plots its report lacked, the index page."""

    folder: Path
    missing: list[str]
    index: Path
    history: str | None = None  # why the history could not be rebuilt, if it could not

    def lines(self, report_dir: Path) -> list[str]:
        """What `inv publish` says of it (`report_dir`: the report published): where it went,
        and what it could not do."""
        said = [f"published: {self.folder} (site: {self.index})"]
        if self.history:
            said.append(f"history not rebuilt: {self.history}")
        if self.missing:
            said.append(
                f"published without {len(self.missing)} plot(s) the report refers to: "
                f"{', '.join(self.missing)} (not in {report_dir})"
            )
        return said


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


def publish_history(
    publish_dir: Path, results_dir: Path, baseline: Path | None = None, gate: dict | None = None
) -> None:
    """Rebuild the site's `history/` from every run stored in `results_dir`, its verdicts with
    the regression gate's settings `gate` ({tolerance, alpha}; None: the gate's defaults). A
    SuiteError (no records, ...) leaves the history there was."""
    from suite.reporting.history import build_history
    from suite.reporting.history_page import write_history

    history = build_history(results_dir, baseline, **(gate or {}))
    staging, target = publish_dir / f".{HISTORY}.partial", publish_dir / HISTORY
    shutil.rmtree(staging, ignore_errors=True)
    files = write_history(history, staging)
    page = render_markdown(files.page.read_text(), staging)
    html = page_html(page, page.title, files.page.name, utc_now())
    (staging / files.page.with_suffix(".html").name).write_text(html)
    old = publish_dir / f".{HISTORY}.old"
    shutil.rmtree(old, ignore_errors=True)
    if target.exists():
        target.rename(old)
    staging.rename(target)
    shutil.rmtree(old, ignore_errors=True)


def _history(publish_dir: Path, note: str | None) -> dict:
    """What the index shows of `history/`: its plots, a link to its page, and why it was not
    rebuilt this time, if it was not."""
    folder = publish_dir / HISTORY
    pages = sorted(folder.glob("*.md"))
    if not pages or not pages[0].with_suffix(".html").exists():
        return {"note": note, "href": None}
    page = render_markdown(pages[0].read_text(), folder, f"{HISTORY}/")
    if note:
        note = f"The history was not rebuilt ({note}): shown as it was last built."
    href = f"{HISTORY}/{pages[0].with_suffix('.html').name}"
    return {"note": note, "href": href, "summary": page.summary, "plots": page.images}


def write_index(publish_dir: Path, history_note: str | None = None) -> Path:
    """Rewrite `index.md` (links to each run's Markdown) and `index.html` (the site's front
    page: the newest run's answer, the history, every run); returns the HTML index."""
    runs = _runs(publish_dir)
    lines = ["# Published LMS benchmark reports", "", "Newest first.", ""]
    lines += [f"- [{run.name}]({run.markdown}): {run.title}" for run in runs]
    write_atomic(publish_dir / "index.md", "\n".join(lines) + "\n")
    latest = _latest(publish_dir, runs[0] if runs else None)
    page = index_html(SITE_TITLE, runs, latest, _history(publish_dir, history_note), utc_now())
    index = publish_dir / "index.html"
    write_atomic(index, page)
    return index


def publish(
    report_dir: Path,
    publish_dir: Path,
    day: str | None = None,
    results_dir: Path | None = None,
    baseline: Path | None = None,
    gate: dict | None = None,
) -> Published:
    """Copy report.md and its PNGs to publish_dir/<day>[-n]/ with the report's HTML page;
    rebuild the history from `results_dir` (if given, with the gate's settings `gate`); rewrite
    the index."""
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
    html = page_html(page, f"{page.title} — {target.name}", report.name, utc_now())
    (staging / "report.html").write_text(html)
    staging.rename(target)  # a reader never sees a half-copied report
    note = None  # without results the history stays as it was last built, if it was
    if results_dir is not None:
        try:
            publish_history(publish_dir, Path(results_dir), baseline, gate)
        except SuiteError as error:  # said on the index and by `inv publish`, in one line
            note = str(error)
    return Published(target, page.missing, write_index(publish_dir, note), note)


def publish_command(
    report_dir, publish_dir, gate: dict, results=None, baseline=None, defaults=(None, None)
) -> list[str]:
    """`inv publish`: the report in `report_dir` published into `publish_dir` (paths or their
    text), the history rebuilt from `results` and checked against `baseline` with the gate's
    settings; what it says. A results directory or baseline file not given is the default one
    (`defaults`: results, baseline), taken only where it exists."""
    report_dir = readable_directory(Path(report_dir), "--reports")
    default_results, default_baseline = (Path(d) if d else None for d in defaults)
    if results:
        results = readable_directory(Path(results), "--results")
    elif default_results and default_results.is_dir():
        results = default_results
    if baseline:
        baseline = Path(baseline)
    elif default_baseline and default_baseline.is_file():
        baseline = default_baseline
    publish_dir = writable_directory(Path(publish_dir), "--to")
    done = publish(report_dir, publish_dir, results_dir=results, baseline=baseline, gate=gate)
    return done.lines(report_dir)
