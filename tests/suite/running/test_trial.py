"""A trial process that dies, hangs or is killed by the OOM killer (suite.running.trial):
classified, with its log's tail."""

import contextlib
import os
from pathlib import Path

import pytest
from trial_cases import tiny_spec

from suite.reporting.limits_table import failure_cause
from suite.running.trial import OOM_KILLED, oom_kills, run_trial

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


MEMORY_CGROUPS = Path("/sys/fs/cgroup/memory")  # cgroup v1's memory controller


@pytest.fixture
def small_memory_cgroup():
    """A memory cgroup of 64 MiB (cgroup v1, as root): a process that joins it and takes more is
    killed by the kernel's OOM killer, as a trial that outgrows the host's memory is."""
    group = MEMORY_CGROUPS / f"lms-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "memory.limit_in_bytes").write_text(str(64 * 2**20))
        swap = group / "memory.memsw.limit_in_bytes"  # with swap: no swapping out of it either
        if swap.exists():
            swap.write_text(str(64 * 2**20))
    except OSError as error:
        pytest.skip(f"cannot make a memory cgroup here ({error}): needs root and cgroup v1")
    yield group
    with contextlib.suppress(OSError):
        group.rmdir()


def test_a_trial_the_oom_killer_ends_is_recorded_as_out_of_host_memory(
    tmp_path, small_memory_cgroup
):
    if oom_kills() is None:
        pytest.skip("this kernel does not count OOM kills in /proc/vmstat")
    env = _fault_env(
        tmp_path,
        "import os\n"
        f"open({str(small_memory_cgroup / 'cgroup.procs')!r}, 'w').write(str(os.getpid()))\n"
        "held = b'x' * (512 * 2**20)\n",
    )
    result = run_trial(tiny_spec().trials[0].params, 120, tmp_path / "t.log", env)
    assert result.outcome == "out_of_memory"
    assert result.error.startswith(OOM_KILLED)
    assert "killed by SIGKILL" in result.error
    # the limits table's "what set the limits"
    assert failure_cause(result.error) == "host memory: killed by the OOM killer"


def test_a_trial_killed_otherwise_is_a_crash(tmp_path):
    env = _fault_env(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    result = run_trial(tiny_spec().trials[0].params, 120, tmp_path / "t.log", env)
    assert result.outcome == "crashed"
    assert "killed by SIGKILL" in result.error and "OOM" not in result.error
