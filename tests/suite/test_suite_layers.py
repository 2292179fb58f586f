"""The suite's folders are its layers (docs/architecture.md): a module imports from its own layer or
the layers before it, never from a later one, and no two modules import each other, not even
through an import inside a function or one made only for type checkers (`if TYPE_CHECKING:`): a
loop a type checker needs is a loop a reader follows too. A lower layer that is handed a later
layer's objects says what it reads of them (a `typing.Protocol`), as suite.lms_seam.LMSTrial and
suite.hosts.docker.Engine do."""

from pathlib import Path

from layers import all_imports, import_cycles

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
    ("suite.selftest",),  # what `inv test` runs
]


def _layer(module: str) -> int | None:
    for index, group in enumerate(LAYERS):
        if any(module == g or module.startswith(g + ".") for g in group):
            return index
    return None


def _modules(override: dict | None = None) -> dict[str, set[str]]:
    """Every suite module and the suite modules it imports, at run time or for type checkers;
    `override` replaces a module's source."""
    modules = {}
    for path in sorted((ROOT / "suite").rglob("*.py")):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        source = (override or {}).get(name) or path.read_text()
        modules[name] = all_imports(source, "suite", ROOT)
    return modules


def _upward(modules: dict) -> list:
    return [
        (module, imported)
        for module, imports in modules.items()
        for imported in sorted(imports)
        if _layer(module) is not None and (_layer(imported) or 0) > _layer(module)
    ]


def test_every_module_has_a_layer():
    assert [m for m in _modules() if m != "suite" and _layer(m) is None] == []


def test_no_module_imports_from_a_later_layer():
    assert _upward(_modules()) == []


def test_no_import_cycles():
    # `from suite.specs import X` depends on the package suite.specs
    assert import_cycles(_modules()) == []


def test_an_import_for_type_checkers_that_closes_a_cycle_is_caught():
    """The loop this test was written against (issue 42): the seam named the specs' TrialParams
    for type checkers while the specs import the seam's link_text. Put back, both tests fail."""
    seam = (ROOT / "suite" / "lms_seam.py").read_text()
    back = seam.replace(
        "import lms\n",
        "import lms\n\nif TYPE_CHECKING:\n    from suite.specs.model import TrialParams\n",
        1,
    )
    found = _modules({"suite.lms_seam": back})
    assert ("suite.lms_seam", "suite.specs.model") in _upward(found)
    loop = {"suite.lms_seam", "suite.specs.model"}
    assert any(loop <= set(cycle) for cycle in import_cycles(found))
