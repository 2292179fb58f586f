"""Tests are found by the module they test: tests/lms/test_<module>.py tests lms/<module>.py,
tests/suite/<package>/test_<module>.py tests suite/<package>/<module>.py (or the package
<module>/; test_<package>.py in its own folder tests the package's __init__). What tests more
than one module (layers, whole runs, the tasks) says so by name or lives in tests/system/."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# test files about a package as a whole, not one module
WHOLE_PACKAGE = {"test_lms_layers.py", "test_suite_layers.py", "test_init.py"}


def _tested_module(test: Path) -> Path:
    folder = test.parent.relative_to(ROOT / "tests")
    name = test.name.removeprefix("test_").removesuffix(".py")
    return ROOT / folder if name == folder.name else ROOT / folder / name


def test_every_unit_test_file_is_named_for_a_module_that_exists():
    strays = []
    tests = [
        *(ROOT / "tests" / "lms").rglob("test_*.py"),
        *(ROOT / "tests" / "suite").rglob("test_*.py"),
    ]
    for test in sorted(tests):
        if test.name in WHOLE_PACKAGE:
            continue
        module = _tested_module(test)
        if not (module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()):
            strays.append(f"{test.relative_to(ROOT)}: no {module.relative_to(ROOT)}(.py)")
    assert not strays, "test files named for no module:\n  " + "\n  ".join(strays)


def test_no_test_file_lies_loose_in_tests():
    loose = sorted(p.name for p in (ROOT / "tests").glob("test_*.py"))
    assert not loose, (
        f"put these by the module they test (tests/lms, tests/suite, tests/system): {loose}"
    )
