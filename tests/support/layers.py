"""What the layer tests of lms and of the suite share: the import cycles among modules."""


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
