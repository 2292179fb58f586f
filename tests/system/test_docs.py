"""The documents stay true to the tree: the README's two commands are what CI runs, every relative
link resolves, the source files the docs name exist, docs/architecture.md lists exactly the
modules there are, benchmarks/README.md has one entry per script, the changelog's versions are
in order, and the README's `lms` example runs."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "CHANGELOG.md",
    ROOT / "benchmarks" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]
FENCE = re.compile(r"^(```|~~~)")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# a source file named in backticks: `lms/memory/simulator.py`, `suite/running/trial.py`, ...
SOURCE_PATH = re.compile(r"`((?:lms|suite|benchmarks|tests|scripts|scheduled|images)/[\w./-]*\w)`")


def _prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks, inline code blanked."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(re.sub(r"`[^`]*`", "``", line))
    return lines


def _fenced_blocks(text: str) -> list[tuple[str, list[str]]]:
    """(language, lines) of every fenced code block."""
    blocks, current = [], None
    for line in text.splitlines():
        match = FENCE.match(line.strip())
        if match and current is None:
            current = (line.strip()[3:].strip(), [])
        elif match:
            blocks.append(current)
            current = None
        elif current is not None:
            current[1].append(line)
    return blocks


def _section(text: str, title: str) -> str:
    """The body of the `## title` section (up to the next heading of level 2)."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    assert match, f"README.md has no '## {title}' section"
    return match.group(1)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"`|\*\*|\*", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    anchors, seen = set(), {}
    for line in _prose_with_code(path.read_text()):
        match = re.match(r"^#{1,6} (.+)$", line)
        if match:
            slug = _slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            anchors.add(slug if count == 0 else f"{slug}-{count}")
    return anchors


def _prose_with_code(text: str) -> list[str]:
    """Lines outside fenced blocks, inline code kept (headings keep their backticked words)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line.strip()):
            fenced = not fenced
        elif not fenced:
            lines.append(line)
    return lines


def _quick_start_commands() -> list[str]:
    section = _section((ROOT / "README.md").read_text(), "Quick start")
    shells = [lines for lang, lines in _fenced_blocks(section) if lang in ("sh", "bash", "shell")]
    return [line.split("#")[0].strip() for block in shells for line in block if line.strip()]


def _task_names() -> set[str]:
    """The task names tasks.py's Collection holds (read, not imported: no invoke needed)."""
    tree = ast.parse((ROOT / "tasks.py").read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Collection":
            return {arg.id.replace("_", "-") for arg in node.args if isinstance(arg, ast.Name)}
    raise AssertionError("tasks.py has no Collection(...)")


def test_readme_quick_start_has_the_two_commands_and_ci_runs_the_second():
    commands = _quick_start_commands()
    assert len(commands) == 2, f"README's quick start should hold two shell commands: {commands}"
    tasks = _task_names()
    for command in commands:
        words = command.split()
        assert words[0] == "./inv", f"{command!r} does not start with ./inv"
        named = [word for word in words[1:] if not word.startswith("-")]
        unknown = [name for name in named if name not in tasks]
        assert named and not unknown, f"{command!r} names no task or unknown ones: {unknown}"
    ci = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert commands[1] in ci, f".ci/run does not run README's test command {commands[1]!r}"


def test_relative_links_resolve():
    broken = []
    for document in DOCUMENTS:
        for line in _prose(document.read_text()):
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
                    continue
                path_part, _, anchor = target.partition("#")
                path = (document.parent / path_part).resolve() if path_part else document
                where = f"{document.relative_to(ROOT)}: ({target})"
                if not path.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                    broken.append(f"{where}: no heading with anchor #{anchor}")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_source_paths_named_in_the_docs_exist():
    """A file of the tree named in today's docs exists (CHANGELOG.md and docs/history.md are
    records of their time: the paths they name were true then)."""
    current = [d for d in DOCUMENTS if d.name != "CHANGELOG.md" and d.name != "history.md"]
    stale = []
    for document in current:
        for path in re.findall(SOURCE_PATH, document.read_text()):
            if not (ROOT / path).exists():
                stale.append(f"{document.relative_to(ROOT)}: `{path}`")
    assert not stale, "paths named in the docs that do not exist:\n" + "\n".join(sorted(stale))


def test_architecture_lists_every_module():
    text = (ROOT / "docs" / "architecture.md").read_text()
    listed = set(re.findall(r"^\| `((?:lms|suite)/[\w/]+\.py)` \|", text, re.M))
    present = {
        path.relative_to(ROOT).as_posix()
        for package in ("lms", "suite")
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    }
    missing, extra = sorted(present - listed), sorted(listed - present)
    assert not missing and not extra, (
        "docs/architecture.md's module table and the tree differ:\n"
        f"  not listed: {missing}\n  listed but absent: {extra}"
    )


def test_benchmarks_readme_has_one_entry_per_script():
    text = (ROOT / "benchmarks" / "README.md").read_text()
    entries = set(re.findall(r"^## `(\w+\.py)`$", text, re.M))
    scripts = {path.name for path in (ROOT / "benchmarks").glob("*.py")}
    assert entries == scripts, (
        f"benchmarks/README.md: no entry for {sorted(scripts - entries)}; "
        f"entries without a script: {sorted(entries - scripts)}"
    )


def test_changelog_versions_newest_first():
    headings = re.findall(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased", f"CHANGELOG.md should open with Unreleased: {headings}"
    versions = [tuple(int(part) for part in h.split(".")) for h in headings[1:]]
    assert versions == sorted(versions, reverse=True), f"versions out of order: {headings}"


@pytest.mark.slow
@pytest.mark.compat
def test_readme_lms_example_runs(tmp_path):
    section = _section((ROOT / "README.md").read_text(), "The LMS library")
    (example,) = [lines for lang, lines in _fenced_blocks(section) if lang == "python"]
    script = tmp_path / "example.py"
    script.write_text("\n".join(example) + "\n")
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=300, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    peaks, traffic = done.stdout.strip().splitlines()[-2:]
    without, with_lms, swapped = map(int, peaks.split())
    assert with_lms < without and swapped > 0, done.stdout  # it planned swaps, as it says
    assert traffic.startswith("SwapTraffic(source='host-store'"), done.stdout
