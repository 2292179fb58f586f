"""lms's folders are its layers (as tests/test_layout.py holds the suite's): a module imports
from its own folder or the folders before it, never from a later one, and no two modules import
each other, not even through an import inside a function or one made only for type checkers
(`if TYPE_CHECKING:`): a loop a type checker needs is a loop a reader follows too."""

import ast
from pathlib import Path

from layers import import_cycles, package_files, private_crossings

ROOT = Path(__file__).resolve().parents[2]

# in order: each may import from itself and from those before it; a folder names all its modules
LAYERS = [
    ("lms.errors", "lms.lazy"),
    # plain values (sizes, parameters, the link, options, report types), TensorFlow's private API
    ("lms._tf_private", "lms.values"),
    # the step's graph and what its kernels hold
    ("lms.graph",),
    # swap plans and the op order
    ("lms.planning",),
    # the memory simulation
    ("lms.memory",),
    # the analysis (a function body's simulated peak) and the tuner
    ("lms.tuning",),
    # split ops
    ("lms.split",),
    # the device: target, mechanisms, host memory, the rewrite
    ("lms.device",),
    # what TensorFlow ran, read back
    ("lms.observe",),
    # the step-time model: a step's profile (its copies matched to swaps) replayed on a link
    ("lms.timing",),
    # the pipeline from step to plan, the closed loop, the public objects
    (
        "lms.calibration",
        "lms.plan_report",
        "lms.plan_request",
        "lms.loop_lists",
        "lms.pipeline",
        "lms.closed_loop",
        "lms.function",
        "lms.api",
        "lms.internal",
    ),
]


def _layer(module: str) -> int | None:
    for index, group in enumerate(LAYERS):
        if any(module == name or module.startswith(name + ".") for name in group):
            return index
    return None


def imports(source: str) -> set[str]:
    """The lms modules `source` imports: at the top, inside a function, or for type checkers;
    `from lms.x import y` imports lms.x.y when that is a module, else lms.x."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "lms" or node.module.startswith("lms."):
                for alias in node.names:
                    name = f"{node.module}.{alias.name}"
                    module = ROOT / (name.replace(".", "/") + ".py")
                    package = ROOT / name.replace(".", "/") / "__init__.py"
                    found.add(name if module.exists() or package.exists() else node.module)
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == "lms"}
    return found


def modules(override: dict | None = None) -> dict[str, set[str]]:
    """Every lms module and what it imports; `override` replaces a module's source."""
    found = {}
    for path in package_files(ROOT, "lms"):  # (not a build's copy under lms/)
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        source = (override or {}).get(name) or path.read_text()
        found[name] = imports(source)
    return found


def upward(found: dict) -> list:
    return [
        (module, imported)
        for module, targets in found.items()
        if module != "lms"
        for imported in sorted(targets)
        if (_layer(imported) or 0) > (_layer(module) or 0)
    ]


def test_every_module_has_a_layer():
    assert [m for m in modules() if m != "lms" and _layer(m) is None] == []


def test_no_module_imports_from_a_later_layer():
    assert upward(modules()) == []


def test_no_import_import_cycles():
    assert import_cycles(modules()) == []


def test_the_package_imports_nothing_at_run_time():
    """`import lms` stays light: its names load on first use (tests/lms/test_init.py)."""
    from layers import run_time_imports

    imported = run_time_imports((ROOT / "lms" / "__init__.py").read_text(), "lms")
    assert imported == {"lms.lazy"}  # the standard library's importlib only


def test_a_function_local_import_that_closes_a_cycle_is_caught():
    """The cycle this test was written against (issue 28): the analysis simulated a function
    body by importing the simulator inside a function, while the simulator's layer imports the
    analysis's graph. Put back, both tests fail."""
    graph = (ROOT / "lms" / "graph" / "step.py").read_text()
    back = graph + "\n\ndef _body(analysis):\n    from lms.memory.simulator import simulate\n"
    found = modules({"lms.graph.step": back})
    assert ("lms.graph.step", "lms.memory.simulator") in upward(found)
    assert any(
        c[0] == "lms.graph.step" and "lms.memory.simulator" in c for c in import_cycles(found)
    )


def test_a_loop_made_only_for_type_checkers_is_caught():
    """The loop issue 42 removed: lms.function imported lms.api's `LMS` under TYPE_CHECKING
    while lms.api imports lms.function. Put back, it is a cycle."""
    function = (ROOT / "lms" / "function.py").read_text()
    back = function + "\n\nif TYPE_CHECKING:\n    from lms.api import LMS\n"
    assert any(
        "lms.api" in c and "lms.function" in c
        for c in import_cycles(modules({"lms.function": back}))
    )


def test_every_module_is_small_and_says_why_it_exists():
    """No lms module over 400 lines, none without a docstring (issue 42)."""
    import ast

    long, silent = [], []
    for name in modules():
        path = ROOT / (name.replace(".", "/") + ".py")
        if not path.is_file():
            path = ROOT / name.replace(".", "/") / "__init__.py"
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long.append(f"{name}: {len(text.splitlines())} lines")
        if not ast.get_docstring(ast.parse(text)):
            silent.append(name)
    assert long == [] and silent == []


def test_no_private_name_crosses_an_lms_file():
    """What one lms module keeps private, no other reaches into (issue 42: LMSFunction drove the
    closed loop through six private methods of LMS). benchmarks/lms_layout.py prints the same."""
    found = private_crossings(package_files(ROOT, "lms"))
    assert [(str(path.relative_to(ROOT)), what) for path, what in found] == []


def test_the_private_name_scan_sees_a_crossing(tmp_path):
    (tmp_path / "lms").mkdir()
    (tmp_path / "lms" / "__init__.py").write_text("")
    (tmp_path / "lms" / "a.py").write_text("def _hidden():\n    pass\n")
    (tmp_path / "lms" / "b.py").write_text(
        "from lms.a import _hidden\nimport lms.a\nlms.a._hidden()\n"
    )
    found = private_crossings(package_files(tmp_path, "lms"))
    assert sorted(what for _, what in found) == ["from lms.a import _hidden", "lms.a._hidden"]
