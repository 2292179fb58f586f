"""What the layer tests of lms and of the suite share: the imports a module makes (at run time,
or also those for type checkers only), and the import cycles among modules."""

import ast
from pathlib import Path


def run_time_imports(source: str, package: str) -> set[str]:
    """The `package` modules `source` imports at run time, at the top or inside a function (not
    under `if TYPE_CHECKING:`); `from package import x` imports the module package.x."""
    return _imports(source, package, for_type_checkers=False)


def all_imports(source: str, package: str, root: Path) -> set[str]:
    """The `package` modules `source` imports at run time or for type checkers only (under
    `if TYPE_CHECKING:`): a loop a type checker needs is a loop a reader follows too. With the
    folder that holds `package` (`root`), `from package.x import y` imports package.x and, where
    y is a module of it, package.x.y too."""
    return _imports(source, package, for_type_checkers=True, root=root)


def _imports(source: str, package: str, for_type_checkers: bool, root: Path | None = None):
    tree = ast.parse(source)
    skipped = set()
    if not for_type_checkers:
        skipped = {
            id(child)
            for node in ast.walk(tree)
            if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
            for child in ast.walk(node)
        }
    found = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == package:
                found |= {f"{package}.{alias.name}" for alias in node.names}
            elif node.module.startswith(package + "."):
                found.add(node.module)
                if root is not None:
                    found |= {
                        name
                        for name in (f"{node.module}.{alias.name}" for alias in node.names)
                        if _is_module(root, name)
                    }
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
    return found


def _is_module(root: Path, name: str) -> bool:
    path = root / name.replace(".", "/")
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def import_cycles(imports: dict) -> list:
    """Every cycle among `imports` (module -> the modules it imports), each as the path that
    closes it; imports of modules outside `imports` and of a module itself do not count."""

    def targets(name):
        return {t for t in imports.get(name, ()) if t in imports and t != name}

    found, state = [], {}

    def visit(name, path):
        state[name] = "open"
        for target in sorted(targets(name)):
            if state.get(target) == "open":
                found.append(path[path.index(target) :] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = "done"

    for name in imports:
        if name not in state:
            visit(name, [name])
    return found


def package_files(root, package: str) -> list:
    """The .py files of `package` under `root` that belong to it: every folder between holds an
    __init__.py (a build's copy under the package does not)."""
    top = root / package
    return [
        path
        for path in sorted(top.rglob("*.py"))
        if all(
            (folder / "__init__.py").is_file() for folder in path.parents if top in folder.parents
        )
    ]


def private_crossings(files: list) -> list:
    """(file, what) for each use of a private name (`_name`, not dunder) that another of `files`
    defines: `from x import _name`, or `something._name` where `something` is not self or cls.
    `_tf_private`, the module of TensorFlow's private API, is meant to be imported."""
    trees = {path: ast.parse(path.read_text()) for path in files}
    defined = {}
    for path, tree in trees.items():
        for node in ast.walk(tree):
            named = isinstance(node, ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef)
            if named and node.name.startswith("_") and not node.name.startswith("__"):
                defined.setdefault(node.name, set()).add(path)
    found = []
    for path, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name in defined and path not in defined[alias.name]:
                        found.append((path, f"from {node.module} import {alias.name}"))
            elif isinstance(node, ast.Attribute) and node.attr in defined:
                owner = getattr(node.value, "id", None)
                if owner not in ("self", "cls") and path not in defined[node.attr]:
                    found.append((path, ast.unparse(node)))
    return found
