"""lms/__init__.py and lms/internal.py: every name resolves, editors and type checkers see the
same names as the lazy tables, the names that left the public surface resolve from lms.internal
with a warning, and the suite and tasks.py reach lms only through the public names."""

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

import lms
import lms.internal

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "lms" / "__init__.py"
INTERNAL = ROOT / "lms" / "internal.py"


def type_checking_imports(path: Path = INIT) -> dict[str, str]:
    """name -> module of the `if TYPE_CHECKING:` block's imports."""
    tree = ast.parse(path.read_text())
    found = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in ast.walk(node):
                if isinstance(child, ast.ImportFrom):
                    for alias in child.names:
                        assert alias.asname in (None, alias.name), alias.name
                        found[alias.name] = child.module
    return found


def test_every_exported_name_resolves():
    missing = []
    for name in lms.__all__:
        try:
            getattr(lms, name)
        except (AttributeError, ImportError) as error:
            missing.append((name, str(error)))
    assert missing == []
    assert set(lms.__all__) <= set(dir(lms))


def test_type_checkers_see_the_names_the_lazy_table_exports():
    """The `TYPE_CHECKING` imports (what editors read) and `_EXPORTS` (what runs) agree, name
    and module, so a name added to one and not the other fails here."""
    assert type_checking_imports() == lms._EXPORTS
    assert lms.__all__ == sorted(lms._EXPORTS)
    assert type_checking_imports(INTERNAL) == lms.internal._EXPORTS
    assert lms.internal.__all__ == sorted(lms.internal._EXPORTS)


def test_lms_internal_loads_on_first_use_like_a_name():
    code = "import lms, sys; print('lms.internal' in sys.modules, lms.internal.__name__)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "lms.internal"], done.stderr[-2000:]


def test_every_internal_name_resolves():
    missing = []
    for name in lms.internal.__all__:
        try:
            getattr(lms.internal, name)
        except (AttributeError, ImportError) as error:
            missing.append((name, str(error)))
    assert missing == []
    with pytest.raises(AttributeError, match="'lms.internal' has no attribute 'LMS'"):
        lms.internal.LMS  # noqa: B018


def test_a_name_that_left_the_public_surface_resolves_from_internal_with_a_warning():
    """Issue 42 took the planning pipeline's names out of `lms`: old code still runs, told where
    they went; they are not public (not in __all__ or dir)."""
    assert lms._MOVED.issubset(lms.internal.__all__)
    assert not lms._MOVED & set(lms.__all__)
    for name in sorted(lms._MOVED):
        with pytest.warns(DeprecationWarning, match=f"lms.{name} moved to lms.internal.{name}"):
            assert getattr(lms, name) is getattr(lms.internal, name)
        assert name not in dir(lms)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'lms' has no attribute 'Planner'"):
        lms.Planner  # noqa: B018


def lms_uses(path: Path) -> list[str]:
    """What `path` reaches of lms besides its public names: imports of lms's modules
    (`import lms.x`, `from lms.x import`), private names (`from lms import _x`), and `lms.x`
    where x is not exported; also in code passed as a string (a probe run with python -c)."""
    return _uses(ast.parse(path.read_text()))


def _probe(text: str) -> ast.Module | None:
    """`text` as a program when it is one that imports lms (a probe run with python -c)."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    return tree if imports else None


def _uses(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.startswith("lms.")]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("lms."):
                found.append(node.module)
            elif node.module == "lms":
                found += [f"lms.{a.name}" for a in node.names if a.name not in lms.__all__]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            probe = _probe(node.value)
            if probe is not None:
                found += _uses(probe)
            else:
                found += re.findall(r"(?:from|import) (lms\.\w+)", node.value)
        elif isinstance(node, ast.Attribute) and getattr(node.value, "id", None) == "lms":
            found += [f"lms.{node.attr}"] if node.attr not in lms.__all__ else []
    return found


def test_the_suite_and_tasks_use_only_lms_public_names():
    files = sorted((ROOT / "suite").rglob("*.py")) + [ROOT / "tasks.py"]
    reached = {str(path.relative_to(ROOT)): uses for path in files if (uses := lms_uses(path))}
    assert reached == {}


def test_the_scan_sees_a_private_module(tmp_path):
    """What the suite did before issue 28 is caught."""
    path = tmp_path / "old.py"
    path.write_text(
        "import lms\n"
        "from lms._tf_private import onednn_enabled\n"
        "from lms.timing.roofline import GPUS\n"
        "lms.timing.profile.swap_graph\n"
        'probe = "from lms._tf_private import onednn_enabled"\n'
        'probe = "import lms; print(int(lms.onednn_enabled()))"\n'
    )
    assert sorted(lms_uses(path)) == [
        "lms._tf_private",
        "lms._tf_private",
        "lms.onednn_enabled",
        "lms.timing",
        "lms.timing.roofline",
    ]
