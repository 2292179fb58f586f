"""The invoke tasks as a user calls them: real subprocesses."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def inv(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_list_explains_every_task():
    listing = inv("--list").stdout
    for name in ("run", "report", "models", "hostinfo", "test", "specs"):
        assert f"  {name} " in listing


def test_user_error_is_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "bad"\n[[study]]\nname = "x"\nkind = "throughput"\n'
        'workload = "googlenet"\nresolution = 64\nbatch = -1\n'
    )
    completed = inv("run", "--spec", str(bad), "--results", str(tmp_path))
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert completed.stderr.strip() == (
        f"error: {bad}: field 'study[0].batch' = -1 is invalid; allowed: an integer >= 1"
    )


def test_models_prints_counts_and_largest_activation():
    completed = inv("models", "--workload", "resnet50", "--resolution", "224")
    assert completed.returncode == 0, completed.stderr
    assert "25,636,712" in completed.stdout and "resnet50" in completed.stdout


def test_hostinfo_prints_json_description():
    import json

    completed = inv("hostinfo")
    description = json.loads(completed.stdout)
    assert description["architecture"] and description["tensorflow_version"]
    assert description["gpus"] == [] and description["cuda_version"] is None
