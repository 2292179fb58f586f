"""What the layer tests of lms and of the suite share: the imports a module makes at run time,
and the import cycles among modules."""

import ast


def run_time_imports(source: str, package: str) -> set[str]:
    """The `package` modules `source` imports at run time, at the top or inside a function (not
    under `if TYPE_CHECKING:`); `from package import x` imports the module package.x."""
    tree = ast.parse(source)
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
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.split(".")[0] == package}
    return found


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
