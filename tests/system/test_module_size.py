"""Every module of the suite, and tasks.py, says in its docstring why it exists, and none is over
400 lines: a module that long does more than one job (split it by job, each part a module that
says why it exists), and tasks.py stays the thin shell docs/architecture.md describes (options in,
a suite call out)."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MOST_LINES = 400


def _modules() -> list[Path]:
    return [ROOT / "tasks.py", *sorted((ROOT / "suite").rglob("*.py"))]


def test_no_suite_module_is_over_400_lines():
    lengths = {path: len(path.read_text().splitlines()) for path in _modules()}
    long = [f"{p.relative_to(ROOT)}: {n} lines" for p, n in lengths.items() if n > MOST_LINES]
    assert not long, f"over {MOST_LINES} lines, split by job:\n  " + "\n  ".join(long)


def test_every_suite_module_says_why_it_exists():
    bare = [
        str(path.relative_to(ROOT))
        for path in _modules()
        if not ast.get_docstring(ast.parse(path.read_text()))
    ]
    assert not bare, "modules without a docstring:\n  " + "\n  ".join(bare)
