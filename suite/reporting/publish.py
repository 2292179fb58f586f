"""`inv publish`: a dated copy of the rendered report (Markdown and plots) in a publish directory,
and an index of every published report, newest first. Earlier reports are never touched."""

import re
import shutil
from datetime import UTC, datetime
from pathlib import Path

from suite.errors import SuiteError

_DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})(?:-(\d+))?$")


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


def write_index(publish_dir: Path) -> Path:
    lines = ["# Published LMS benchmark reports", "", "Newest first.", ""]
    for folder in _published(publish_dir):
        report = folder / "report.md"
        if report.exists():
            lines.append(f"- [{folder.name}]({folder.name}/report.md): {_title(report)}")
    index = publish_dir / "index.md"
    index.write_text("\n".join(lines) + "\n")
    return index


def publish(report_dir: Path, publish_dir: Path, day: str | None = None) -> Path:
    """Copy report.md and its PNGs to publish_dir/<day>[-n]/; rewrite the index. Returns the
    new report's directory."""
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
    staging.rename(target)  # a reader never sees a half-copied report
    write_index(publish_dir)
    return target
