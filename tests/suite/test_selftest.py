"""suite.selftest: `inv test`'s commands, in order, as tasks.py runs them."""

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
        "py -m pytest -ra --durations=30",
        'TF_ENABLE_ONEDNN_OPTS=0 py -m pytest -ra --durations=30 -m "kernels"',
        "flock test-artifacts/venv-tf2.14.lock bash scripts/venv.sh /r/.venv-tf2.14 tf214,dev",
        "/r/.venv-tf2.14/bin/python -m pytest -ra --durations=30 -m compat",
    ]
    # only the kernels' session may select nothing (-k) and says what failed; the rest stop at once
    assert [c.passes for c in commands].count(None) == len(commands) - 1
    (kernels,) = [c for c in commands if c.passes]
    assert kernels.passes == (0, 5)
    assert kernels.failure == "the tests with TF_ENABLE_ONEDNN_OPTS=0 failed"


def test_what_is_not_set_up_is_deselected_and_k_selects_in_every_session(monkeypatch):
    setups = {"docker": False, "slurm": True, "chromium": False}
    options = {"lint": False, "compat": False, "k": "plan", "setups": setups}
    commands = _lines(monkeypatch, onednn=False, gpu=True, **options)
    not_set_up = "not docker and not chromium"
    assert [c.line for c in commands] == [
        "bash scripts/slurm.sh",
        f'py -m pytest -ra --durations=30 -m "{not_set_up}" -k "plan"',
        "TF_ENABLE_ONEDNN_OPTS=1 py -m pytest -ra --durations=30"
        f' -m "kernels and {not_set_up}" -k "plan"',
        'LMS_TEST_GPU=1 py -m pytest -ra --durations=30 -m gpu -k "plan"',
    ]
    assert commands[-1].failure == "the GPU tests failed" and commands[-1].passes == (0, 5)


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
