"""lms/__init__.py: every public name resolves, editors and type checkers see the same names as
the lazy table, and the suite and tasks.py reach lms only through them."""

import ast
import re
from pathlib import Path

import pytest

import lms

ROOT = Path(__file__).resolve().parents[2]
INIT = ROOT / "lms" / "__init__.py"


def type_checking_imports() -> dict[str, str]:
    """name -> module of the `if TYPE_CHECKING:` block's imports."""
    tree = ast.parse(INIT.read_text())
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


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="module 'lms' has no attribute 'Planner'"):
        lms.Planner  # noqa: B018


def lms_uses(path: Path) -> list[str]:
    """What `path` reaches of lms besides its public names: imports of lms's modules
    (`import lms.x`, `from lms.x import`), private names (`from lms import _x`), and `lms.x`
    where x is not exported; also in code passed as a string (a probe run with python -c)."""
    tree = ast.parse(path.read_text())
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
    )
    assert sorted(lms_uses(path)) == [
        "lms._tf_private",
        "lms._tf_private",
        "lms.timing",
        "lms.timing.roofline",
    ]
