"""Signals inside `suite.running.interrupts.interruptible()`: real signals sent to a real
process."""

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from suite.running.interrupts import RunInterrupted, interruptible

CHILD = textwrap.dedent(
    """
    import os, signal, sys, time
    from suite.running.interrupts import RunInterrupted, interruptible
    try:
        with interruptible():
            print("ready", flush=True)
            time.sleep(120)
    except RunInterrupted as error:
        print(f"caught {error.signal_name}: {error}", flush=True)
        sys.exit(3)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_sigint_and_sigterm_unwind_the_run_as_one_exception(signum):
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True, env=env
    )
    assert child.stdout.readline().strip() == "ready"
    child.send_signal(signum)
    out, _ = child.communicate(timeout=60)
    name = signal.Signals(signum).name
    assert child.returncode == 3
    assert out.strip() == f"caught {name}: interrupted by {name}"


def test_handlers_are_restored_and_nesting_keeps_the_outer_ones():
    before = signal.getsignal(signal.SIGTERM)
    with interruptible():
        inner = signal.getsignal(signal.SIGTERM)
        with interruptible():
            assert signal.getsignal(signal.SIGTERM) is inner
        assert signal.getsignal(signal.SIGTERM) is inner
    assert signal.getsignal(signal.SIGTERM) is before


def test_exit_codes_follow_the_shell():
    assert RunInterrupted("SIGINT").exit_code == 130
    assert RunInterrupted("SIGTERM").exit_code == 143
