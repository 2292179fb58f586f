"""`lms` on its own (issue 42, item 6): its distribution (lms/pyproject.toml) installs into a
fresh virtualenv, non-editable, with every module and nothing of the suite, declares only numpy
(TensorFlow and matplotlib as extras), and its README's example trains there. The suite requires
it like any user (the root pyproject.toml), and lms imports nothing it does not declare.

The fresh venv sees the outer one's site-packages through a .pth line, so that TensorFlow is not
downloaded: a .pth line adds a folder to sys.path without running the .pth files in it, so the
outer editable installs (lms and the suite from this checkout) stay invisible; the test checks
that `import lms` fails there before the install. No network: the outer pip installs into the
fresh venv with --no-index and builds with the outer setuptools (--no-build-isolation)."""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
import tomllib
from pathlib import Path

import pytest

import lms

ROOT = Path(__file__).resolve().parents[2]
LMS = ROOT / "lms"
PROJECT = tomllib.loads((LMS / "pyproject.toml").read_text())
DISTRIBUTION = PROJECT["project"]["name"]
# what lms may import besides the standard library and itself: TensorFlow (with the Keras it
# brings), numpy, matplotlib (the plot extra, imported when a plot is asked for) and pynvml
# (nvidia-ml-py where installed: the GPU's memory as the default budget; None without it)
ALLOWED_IMPORTS = {"tensorflow", "keras", "numpy", "matplotlib", "pynvml"}


def _packages_in_the_checkout() -> set[str]:
    return {
        ".".join(("lms", *path.parent.relative_to(LMS).parts))
        for path in LMS.rglob("__init__.py")
        if "build" not in path.relative_to(LMS).parts
    }


def _modules(folder: Path) -> set[str]:
    """The modules of the lms package in `folder` (a checkout's lms/), as the wheel names them."""
    return {
        f"lms/{path.relative_to(folder).as_posix()}"
        for path in folder.rglob("*.py")
        if "build" not in path.relative_to(folder).parts
        and "__pycache__" not in path.parts
        and (path.parent / "__init__.py").is_file()
    }


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[]", requirement, maxsplit=1)[0].lower()


def test_the_distribution_lists_every_package_of_lms():
    """A folder of lms with an __init__.py that is missing from lms/pyproject.toml's packages
    would be left out of the wheel (the install test below sees it too)."""
    assert set(PROJECT["tool"]["setuptools"]["packages"]) == _packages_in_the_checkout()


def test_lms_declares_numpy_and_its_extras_only_and_the_suite_requires_it():
    assert [_requirement_name(r) for r in PROJECT["project"]["dependencies"]] == ["numpy"]
    extras = PROJECT["project"]["optional-dependencies"]
    assert {name: [_requirement_name(r) for r in pins] for name, pins in extras.items()} == {
        "tensorflow": ["tensorflow"],
        "plot": ["matplotlib"],
    }
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    version = PROJECT["project"]["version"]
    assert f"{DISTRIBUTION}[plot]=={version}" in root["dependencies"]
    # the plot extra pins the matplotlib the suite pins
    assert extras["plot"][0] in root["dependencies"]


def test_lms_imports_only_what_it_declares():
    """Every import of lms's modules (at the top or inside a function) is of the standard
    library, of lms, or of ALLOWED_IMPORTS."""
    strays = []
    for path in sorted(LMS.rglob("*.py")):
        if "build" in path.relative_to(LMS).parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top not in sys.stdlib_module_names | ALLOWED_IMPORTS | {"lms"}:
                    strays.append(f"{path.relative_to(ROOT)}: {name}")
    assert strays == []


def test_the_suite_image_gets_lms_from_its_sources_not_from_pypi(tmp_path):
    """The image installs the root's pins from PyPI: the lms distribution is not on PyPI, so it
    stays out of them, and the image has lms from its sources (src/lms, on its PYTHONPATH)."""
    from suite.hosts.images import prepare_context

    prepare_context(tmp_path, "x86_64")
    pinned = (tmp_path / "build" / "requirements-base.txt").read_text().split()
    assert pinned and DISTRIBUTION not in {_requirement_name(r) for r in pinned}
    assert (tmp_path / "src" / "lms" / "__init__.py").is_file()


def test_readme_links_resolve():
    broken = []
    for target in re.findall(
        r"(?<!!)\[[^\]]*\]\(([^)\s#]+)[^)]*\)", (LMS / "README.md").read_text()
    ):
        if not re.match(r"^[a-z]+:", target) and not (LMS / target).exists():
            broken.append(target)
    assert broken == []


def _readme_example() -> str:
    """The first ```python block of lms/README.md that is a whole program (imports lms)."""
    blocks = re.findall(r"^```python\n(.*?)^```", (LMS / "README.md").read_text(), re.M | re.S)
    return next(block for block in blocks if "import lms" in block)


# run in the fresh venv after the install: where lms comes from, what it declares, what it holds
PROBE = """
import importlib.metadata, json, sys, lms
dist = importlib.metadata.distribution(sys.argv[1])
files = [f for f in dist.files]
print(json.dumps({
    "lms": lms.__file__,
    "requires": dist.requires,
    "version": dist.version,
    "files": sorted(str(f) for f in files),
    "bytes": sum(f.size or 0 for f in files),
    "public": lms.__all__,
}))
"""

# appended to the README's example: it trained, with LMS swapping, under its budget
CHECKS = """
assert report.peak_bytes_with_lms < report.peak_bytes_without_lms and report.swapped_tensors > 0
assert report.peak_bytes_with_lms <= report.budget_bytes, report
calibration = report.calibration
measured = calibration and calibration["attempts"][-1]["measured_peak_bytes"]
assert measured is None or measured <= calibration["device_limit_bytes"], calibration
traffic = step.traffic()
assert traffic.steps == 6 and traffic.swap_outs_per_step > 0, traffic
print("CHECKED", lms.__file__, measured)
"""


@pytest.mark.slow
def test_lms_installs_alone_into_a_fresh_venv_and_its_readme_example_trains(tmp_path):
    started = time.perf_counter()
    venv = tmp_path / "venv"
    # no pip of its own: the outer pip (through the .pth) installs into it, as into any venv
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    # TensorFlow, numpy, keras (and setuptools to build with) from the outer venv
    (site / "outer.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env |= {"TF_CPP_MIN_LOG_LEVEL": "2", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}

    def run(*args, cwd=tmp_path, timeout=300):
        return subprocess.run(
            [str(python), *map(str, args)],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=timeout,
        )

    visible = "from importlib.util import find_spec as f; print(f('tensorflow') and f('keras'))"
    assert run("-c", visible).stdout.strip() not in ("", "None")
    before = run("-c", "import numpy; import lms")
    assert "No module named 'lms'" in before.stderr, before.stderr[-2000:]
    venv_at = time.perf_counter()

    # a copy, so that the build's leftovers (egg-info, ../build) stay out of the checkout
    source = tmp_path / "source" / "lms"
    shutil.copytree(LMS, source, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    install = run("-m", "pip", "install", "--no-deps", "--no-index", "--no-build-isolation", source)
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    installed_at = time.perf_counter()

    probe = run("-c", PROBE, DISTRIBUTION)
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert Path(found["lms"]).is_relative_to(site), found["lms"]
    assert found["version"] == PROJECT["project"]["version"]
    requires = found["requires"]
    assert [r for r in requires if "extra ==" not in r] == ["numpy>=1.23.5"], requires
    extras = {
        _requirement_name(r): re.search(r'extra == "(\w+)"', r)[1] for r in requires if "extra" in r
    }
    assert extras == {"tensorflow": "tensorflow", "matplotlib": "plot"}, requires
    modules = {f for f in found["files"] if f.startswith("lms/") and f.endswith(".py")}
    assert modules == _modules(source)
    others = [f for f in found["files"] if f.startswith("lms/") and not f.endswith(".py")]
    assert all(f.endswith(".pyc") for f in others), others  # no pyproject.toml, no README.md
    tops = {f.split("/")[0] for f in found["files"]}
    assert tops == {"lms", f"{DISTRIBUTION.replace('-', '_')}-{found['version']}.dist-info"}
    assert 100_000 < found["bytes"] < 2_000_000, found["bytes"]  # about 0.45 MB of Python
    assert found["public"] == lms.__all__

    script = tmp_path / "example.py"
    script.write_text(_readme_example() + CHECKS)
    example = run(script, timeout=600)
    assert example.returncode == 0, example.stdout[-2000:] + example.stderr[-3000:]
    checked = example.stdout.strip().splitlines()[-1].split()
    assert checked[0] == "CHECKED" and Path(checked[1]).is_relative_to(site)
    print(
        f"venv {venv_at - started:.1f} s, install {installed_at - venv_at:.1f} s "
        f"({len(found['files'])} files, {found['bytes'] / 1e3:.0f} kB besides the .pyc, which pip "
        f"records unsized), the README's example {time.perf_counter() - installed_at:.1f} s "
        f"(measured peak {checked[2]})"
    )
