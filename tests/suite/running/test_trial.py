"""A trial process that dies or hangs (suite.running.trial): classified, with its log's tail."""

import pytest
from trial_cases import tiny_spec

from suite.running.trial import run_trial

pytestmark = pytest.mark.slow


def _fault_env(tmp_path, code):
    """A sitecustomize that runs `code` at interpreter start: a real fault in the trial process."""
    (tmp_path / "fault").mkdir()
    (tmp_path / "fault" / "sitecustomize.py").write_text(code)
    return {"PYTHONPATH": str(tmp_path / "fault")}


def test_a_crashing_trial_is_recorded_as_crashed_with_its_log_tail(tmp_path):
    env = _fault_env(
        tmp_path,
        "import os, signal, sys\n"
        "print('\\n'.join(f'line {i}' for i in range(200)), file=sys.stderr, flush=True)\n"
        "print('fault injected: segfault next', file=sys.stderr, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGSEGV)\n",
    )
    result = run_trial(tiny_spec().trials[0].params, 120, tmp_path / "t.log", env)
    assert result.outcome == "crashed"
    assert "killed by SIGSEGV" in result.error
    tail = result.error.split("log tail:\n", 1)[1]
    assert tail.rstrip().endswith("fault injected: segfault next")  # the last lines, in order
    assert "line 199" in tail and "line 0\n" not in tail  # a tail, not the whole log


def test_a_hanging_trial_is_timed_out_and_killed(tmp_path):
    env = _fault_env(tmp_path, "import time\ntime.sleep(3600)\n")
    result = run_trial(tiny_spec().trials[0].params, 2, tmp_path / "t.log", env)
    assert result.outcome == "timed_out"
