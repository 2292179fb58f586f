"""The suite's folders are its layers (docs/architecture.md): a module imports from its own layer or
the layers before it, never from a later one, and no two modules import each other."""

from pathlib import Path

from layers import import_cycles, run_time_imports

ROOT = Path(__file__).resolve().parents[2]

# in order: each may import from itself and from those before it
LAYERS = [
    ("suite.errors", "suite.units", "suite.stats", "suite.environment"),
    ("suite.lms_seam",),
    ("suite.workloads",),
    ("suite.specs",),
    ("suite.records",),
    ("suite.hosts",),
    ("suite.running",),
    ("suite.dispatch",),
    ("suite.reporting",),
]


def _layer(module: str) -> int | None:
    for index, group in enumerate(LAYERS):
        if any(module == g or module.startswith(g + ".") for g in group):
            return index
    return None


def _imports(path: Path) -> set[str]:
    """Suite modules `path` imports at run time (not under `if TYPE_CHECKING:`)."""
    return run_time_imports(path.read_text(), "suite")


def _modules() -> dict[str, set[str]]:
    modules = {}
    for path in sorted((ROOT / "suite").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        modules[name] = _imports(path)
    return modules


def test_every_module_has_a_layer():
    assert [m for m in _modules() if m != "suite" and _layer(m) is None] == []


def test_no_module_imports_from_a_later_layer():
    upward = [
        (module, imported)
        for module, imports in _modules().items()
        for imported in imports
        if _layer(module) is not None and (_layer(imported) or 0) > _layer(module)
    ]
    assert upward == []


def test_no_import_cycles():
    # `from suite.specs import X` depends on the package suite.specs
    assert import_cycles(_modules()) == []
