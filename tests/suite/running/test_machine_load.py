"""The machine's load while a trial measures (suite/running/machine_load.py), with real processes
burning real CPU."""

import os
import subprocess
import sys
import time

import psutil

from suite.records import MachineLoad, Spread
from suite.running.machine_load import LoadMonitor, busy_text, is_busy

BURN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def test_another_process_burning_a_core_counts_as_others():
    """The burner is not this process's descendant (a shell starts it in the background and
    exits, so it is re-parented): a trial's own children count as its own."""
    code = BURN.format(seconds=30)
    started = subprocess.run(
        ["sh", "-c", f'{sys.executable} -c "$0" >/dev/null 2>&1 & echo $!', code],
        capture_output=True,
        text=True,
        check=True,
    )
    burner = psutil.Process(int(started.stdout))
    try:
        assert burner not in psutil.Process().children(recursive=True)
        time.sleep(0.3)  # it is running
        with LoadMonitor(interval_s=0.2) as load:
            time.sleep(2.0)
    finally:
        burner.kill()
    summary = load.summary()
    assert summary.other_cores.mean >= 0.5  # the burner's core (noise only adds)
    assert len(load.others) >= 5
    assert is_busy(summary) == (summary.other_cores.mean >= 0.25 * summary.cores)


def test_the_trials_own_cpu_is_not_counted_as_others():
    """Burning in this process: the machine's busy cores include it, the others' do not (a
    difference of the process's own CPU time, so noise from elsewhere cannot make it pass)."""
    before = sum(os.times()[:2])
    with LoadMonitor(interval_s=0.2) as load:
        _burn(2.0)
    own_cores = (sum(os.times()[:2]) - before) / load.summary().seconds
    summary = load.summary()
    assert own_cores > 0.1  # (the CPU it got: beside other work, less than a core)
    assert summary.busy_cores.mean - summary.other_cores.mean >= 0.8 * own_cores
    assert summary.load_average_1m["before"] is not None and summary.seconds >= 2.0


def test_the_trials_own_children_count_as_its_own():
    """A replicated trial's workers are its children: their CPU is the trial's, not others'.
    Compared with the CPU the child really got, not with a whole core: beside other work (CI
    runs the Docker and Slurm tests beside this session) a burner got less than half a core,
    and the trial's own cores (busy minus others) with it."""
    worker = subprocess.Popen([sys.executable, "-c", BURN.format(seconds=30)])
    try:
        time.sleep(0.3)
        child = psutil.Process(worker.pid)
        before = sum(child.cpu_times()[:2])
        with LoadMonitor(interval_s=0.2) as load:
            time.sleep(2.0)
        used = sum(child.cpu_times()[:2]) - before
    finally:
        worker.kill()
        worker.wait()
    summary = load.summary()
    child_cores = used / summary.seconds
    assert child_cores > 0.1  # it ran
    assert summary.busy_cores.mean - summary.other_cores.mean >= 0.8 * child_cores


def test_old_records_and_odd_values_are_not_busy():
    assert not is_busy(None)  # a record from before the load was measured
    busy = MachineLoad(2, Spread(0.9, 1.4))
    assert is_busy(busy) and not is_busy(MachineLoad(2, Spread(0.2, 1.0)))
    assert not is_busy(MachineLoad(0, Spread(0.9, 1.4)))
    assert busy_text(busy) == "others used 0.9 of 2 cores"


def test_a_load_it_cannot_read_never_fails_the_trial(monkeypatch):
    """Under qemu-user psutil once refused the trial's own process ("PID has been reused") and
    the aarch64 trial crashed: now the load is unknown (None) and the steps go on."""
    import suite.running.machine_load as machine_load

    def unreadable():
        raise psutil.NoSuchProcess(16, msg="process no longer exists and its PID has been reused")

    monkeypatch.setattr(machine_load, "_machine_busy_seconds", unreadable)
    with LoadMonitor(interval_s=0.05) as load:
        _burn(0.2)
    assert load.summary() is None and "NoSuchProcess" in load.error
    assert not is_busy(load.summary())
