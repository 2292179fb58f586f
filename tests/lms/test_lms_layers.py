"""lms's modules in layers (as tests/test_layout.py holds the suite's): a module imports from its
own layer or the layers before it, never from a later one, and no two modules import each other,
not even through an import inside a function (only `if TYPE_CHECKING:` imports are exempt)."""

from pathlib import Path

from layers import import_cycles, run_time_imports

ROOT = Path(__file__).resolve().parents[2]

# in order: each may import from itself and from those before it
LAYERS = [
    ("lms.errors",),
    # plain values and TensorFlow's private API, in one place
    ("lms.budget", "lms.parameters", "lms.link", "lms.report", "lms._tf_private"),
    # the options, the closed loop's bookkeeping, the step-time model, the host's memory
    # (no graph)
    ("lms.options", "lms.calibration", "lms.steptime", "lms.host_memory"),
    # the step's graph and what its kernels and allocator hold
    ("lms.loops", "lms.graph_passes", "lms.graph", "lms.cpu_host", "lms.kernels"),
    # ... and the device a step runs on (its mechanism kind, budgets, meter)
    ("lms.allocator", "lms.padding", "lms.target"),
    # plans
    ("lms.ordering", "lms.planner"),
    # simulation
    ("lms.schedule", "lms.lifetimes", "lms.simulator"),
    # what simulates: the analysis (a function body's peak), the explained peak, the tuner
    ("lms.analysis", "lms.explain", "lms.tuner", "lms.plot"),
    # the rewritten step: swap mechanisms, split ops, the rewrite, its profile
    (
        "lms.swap",
        "lms.halo",
        "lms.split_norm",
        "lms.split",
        "lms.splitting",
        "lms.rewriter",
        "lms.profile",
        "lms.copy_events",
        "lms.copy_match",
        "lms.roofline",
        "lms.placement",
        "lms.grappler_replay",
    ),
    # the LMS object: its report, its device, the wrapped step
    ("lms.plan_report", "lms.device", "lms.function", "lms.api"),
]


def _layer(module: str) -> int | None:
    for index, group in enumerate(LAYERS):
        if module in group:
            return index
    return None


def imports(source: str) -> set[str]:
    return run_time_imports(source, "lms")


def modules(override: dict | None = None) -> dict[str, set[str]]:
    """Every lms module and what it imports; `override` replaces a module's source."""
    found = {}
    for path in sorted((ROOT / "lms").glob("*.py")):
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


def test_the_package_imports_its_exports_only_for_type_checkers():
    """`import lms` stays light: its names load on first use (tests/lms/test_init.py)."""
    assert modules()["lms"] == set()


def test_a_function_local_import_that_closes_a_cycle_is_caught():
    """The cycle this test was written against (issue 28): the analysis simulated a function
    body by importing the simulator inside a function, while the simulator's layer imports the
    analysis's graph. Put back, both tests fail."""
    graph = (ROOT / "lms" / "graph.py").read_text()
    back = graph + "\n\ndef _body(analysis):\n    from lms.simulator import simulate\n"
    found = modules({"lms.graph": back})
    assert ("lms.graph", "lms.simulator") in upward(found)
    assert any(c[0] == "lms.graph" and "lms.simulator" in c for c in import_cycles(found))
