"""suite.selftest: `inv test`'s commands, in order, as tasks.py runs them."""

import subprocess
import time
from pathlib import Path

from suite import selftest


def _lines(monkeypatch, onednn=True, gpu=False, **options):
    monkeypatch.setattr(selftest, "onednn_enabled", lambda python, root: onednn)
    monkeypatch.setattr(selftest, "has_gpu", lambda: gpu)
    settings = {"compat": True, "lint": True, "k": None} | options
    setups = settings.pop("setups", {"docker": True, "slurm": True, "chromium": True})
    return list(selftest.commands("py", Path("/r"), setups=setups, **settings))


def test_everything_runs_in_order_with_the_other_kernels_once_more(monkeypatch):
    commands = _lines(monkeypatch)
    assert [c.line for c in commands] == [
        "bash scripts/docker.sh",
        "bash scripts/slurm.sh",
        "bash scripts/chromium.sh",
        "mkdir -p test-artifacts && exec 9>test-artifacts/venv-tf2.14.lock && flock 9 && "
        "{ nohup timeout 3600 nice -n 10 bash scripts/venv.sh /r/.venv-tf2.14 tf214,dev "
        ">test-artifacts/venv-tf2.14.log 2>&1 & }",
        "mkdir -p test-artifacts && exec 9>test-artifacts/prebuild-images.lock && flock 9 && "
        "{ nohup timeout 3600 nice -n 10 py tests/support/_prebuild_images.py "
        ">test-artifacts/prebuild-images.log 2>&1 & }",
        "py -m ruff check .",
        "py -m ruff format --check .",
        # the Docker and Slurm tests beside everything that follows, collected at the end
        "mkdir -p test-artifacts && exec 9>test-artifacts/docker-slurm-tests.lock && flock 9 && "
        "{ nohup sh -c 'rm -f test-artifacts/docker-slurm-tests.status; timeout 7200 "
        'py -m pytest -ra --durations=30 -m "docker or slurm"; '
        "echo $? >test-artifacts/docker-slurm-tests.status' "
        ">test-artifacts/docker-slurm-tests.log 2>&1 & }",
        'py -m pytest -ra --durations=30 -m "not docker and not slurm"',
        'TF_ENABLE_ONEDNN_OPTS=0 py -m pytest -ra --durations=30 -m "kernels"',
        "flock test-artifacts/venv-tf2.14.lock bash scripts/venv.sh /r/.venv-tf2.14 tf214,dev",
        "/r/.venv-tf2.14/bin/python -m pytest -ra --durations=30 -m compat",
        "flock test-artifacts/docker-slurm-tests.lock cat test-artifacts/docker-slurm-tests.log; "
        'exit "$(cat test-artifacts/docker-slurm-tests.status 2>/dev/null || echo 1)"',
    ]
    # the kernels' session may select nothing (-k), and it and the session beside say what failed;
    # the rest stop at once
    assert [c.passes for c in commands].count(None) == len(commands) - 2
    kernels, side = [c for c in commands if c.passes]
    assert kernels.passes == (0, 5)
    assert kernels.failure == "the tests with TF_ENABLE_ONEDNN_OPTS=0 failed"
    assert side.passes == (0,)
    assert side.failure == (
        "the docker and slurm tests failed (their session's log is printed above)"
    )


def test_what_is_not_set_up_is_deselected_and_k_selects_in_every_session(monkeypatch):
    setups = {"docker": False, "slurm": True, "chromium": False}
    options = {"lint": False, "compat": False, "k": "plan", "setups": setups}
    commands = _lines(monkeypatch, onednn=False, gpu=True, **options)
    not_set_up = "not docker and not chromium"
    lines = [c.line for c in commands]
    assert lines[0] == "bash scripts/slurm.sh"
    assert f'-m pytest -ra --durations=30 -m "(slurm) and {not_set_up}" -k "plan";' in lines[1]
    assert lines[2:5] == [
        f'py -m pytest -ra --durations=30 -m "{not_set_up} and not slurm" -k "plan"',
        "TF_ENABLE_ONEDNN_OPTS=1 py -m pytest -ra --durations=30"
        f' -m "kernels and {not_set_up}" -k "plan"',
        'LMS_TEST_GPU=1 py -m pytest -ra --durations=30 -m gpu -k "plan"',
    ]
    assert commands[4].failure == "the GPU tests failed" and commands[4].passes == (0, 5)
    assert lines[5].startswith("flock test-artifacts/docker-slurm-tests.lock") and len(lines) == 6
    assert commands[5].failure.startswith("the slurm tests failed") and commands[5].passes == (0, 5)


def test_without_docker_and_slurm_no_session_runs_beside(monkeypatch):
    setups = {"docker": False, "slurm": False, "chromium": True}
    lines = [c.line for c in _lines(monkeypatch, setups=setups, compat=False, lint=False)]
    assert lines == [
        "bash scripts/chromium.sh",
        'py -m pytest -ra --durations=30 -m "not docker and not slurm"',
        'TF_ENABLE_ONEDNN_OPTS=0 py -m pytest -ra --durations=30 -m "kernels and not docker and '
        'not slurm"',
    ]


def test_the_images_are_built_in_the_background_only_with_docker_and_without_k(monkeypatch):
    cases = (({"docker": True}, None), ({"docker": True}, "plan"), ({"docker": False}, None))
    for setups, k in cases:
        lines = [c.line for c in _lines(monkeypatch, setups=setups, k=k)]
        prebuilds = [line for line in lines if "_prebuild_images.py" in line]
        assert len(prebuilds) == (setups["docker"] and k is None), lines


def test_a_background_line_takes_its_lock_before_it_returns():
    """Only the command goes to the background: what takes the lock later waits for it."""
    line = selftest.in_background("make it", Path("test-artifacts/x.lock"))
    assert line == (
        "mkdir -p test-artifacts && exec 9>test-artifacts/x.lock && flock 9 && "
        "{ nohup timeout 3600 nice -n 10 make it >test-artifacts/x.log 2>&1 & }"
    )


def test_a_session_beside_returns_at_once_and_is_collected_with_its_log_and_exit_code(tmp_path):
    """Real shells, as invoke runs each line (bash -c): the session's start returns while it
    runs, and its collection waits for it, prints what it printed and exits as it did."""
    lock = tmp_path / "artifacts" / "side.lock"
    lock.parent.mkdir()
    lock.with_suffix(".status").write_text("0\n")  # a passed session's, from an earlier run
    session = "sh -c 'sleep 2; echo \"it ran\"; exit 3'"

    def bash(line):
        return subprocess.run(["bash", "-c", line], capture_output=True, text=True, timeout=60)

    started = time.monotonic()
    assert bash(selftest.beside(session, lock)).returncode == 0
    assert time.monotonic() - started < 1.5  # it did not wait for the session
    collected = bash(selftest.collect(lock))
    assert time.monotonic() - started >= 2  # it did
    assert (collected.returncode, collected.stdout) == (3, "it ran\n")
    lock.with_suffix(".status").unlink()  # a session killed before it could say how it ended
    assert bash(selftest.collect(lock)).returncode == 1
