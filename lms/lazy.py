"""Names that load on first use: how `lms` and `lms.internal` hand out their names without
importing TensorFlow when the package is imported (`import lms` checks options and reads
records with the standard library only)."""

import importlib


def lazy_names(namespace: dict, exports: dict, other=None):
    """`__getattr__` and `__dir__` of a module whose names load on first use: `exports` maps
    each to the module that defines it; `other(name)` answers a name that is not there."""

    def __getattr__(name: str):
        module = exports.get(name)
        if module is None:
            if other is not None:
                return other(name)
            raise AttributeError(f"module {namespace['__name__']!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        namespace[name] = value  # later lookups skip __getattr__
        return value

    def __dir__():
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__
