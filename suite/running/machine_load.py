"""How busy the machine was while a trial measured: what other processes used of its cores.

The trial's own rate says how fast it ran, not why: a step slowed by a compile job beside it looks
like a slower suite. So the trial process samples, while its steps run, the machine's busy cores
(psutil's CPU times of the whole machine) and its own (its process and any children), and keeps
the difference: the cores other processes took. The load average is kept too (it counts the
trial's own threads, so it reads only beside the core count). The report flags a measurement
taken while others held `BUSY_SHARE` of the cores or more (`is_busy`).
"""

import contextlib
import os
import threading
import time

import psutil

from suite.records import MachineLoad, Spread

BUSY_SHARE = 0.25  # others held a quarter of the cores: on 2 cores, half a core on average
INTERVAL_S = 0.5


def _own_cpu_seconds() -> float:
    """CPU seconds of this process (all its threads, from the kernel: `os.times`) and of its
    live children (a replicated trial's workers). Under qemu-user psutil may not recognise this
    process (its create time does not match: "PID has been reused"), so psutil reads only the
    children, and a child it cannot read is left out."""
    times = os.times()
    total = times.user + times.system
    try:
        children = psutil.Process().children(recursive=True)
    except psutil.Error:
        return total
    for child in children:
        try:
            cpu = child.cpu_times()
        except psutil.Error:  # ended between listing and reading, or unreadable
            continue
        total += cpu.user + cpu.system
    return total


def _machine_busy_seconds() -> float:
    times = psutil.cpu_times()
    return times.user + times.system + getattr(times, "nice", 0.0) + getattr(times, "irq", 0.0)


class LoadMonitor:
    """Samples, in a thread, the cores other processes used between start and stop.

    with LoadMonitor() as load:
        ...  # the measured steps
    Metrics(machine_load=load.summary(), ...)  # suite.records
    """

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.others: list[float] = []  # cores other processes used, per interval
        self.busy: list[float] = []  # cores the whole machine used, per interval
        self._stop = threading.Event()
        self._thread = None
        self.load_before = self.load_after = None
        self.seconds = 0.0
        self.error = None  # why the load could not be read, if it could not

    def __enter__(self) -> "LoadMonitor":
        self._started = time.perf_counter()
        try:
            self.load_before = os.getloadavg()[0]
            self._last = (time.perf_counter(), _machine_busy_seconds(), _own_cpu_seconds())
        except Exception as error:  # noqa: BLE001 - a load it cannot read never fails a trial
            self.error = f"{type(error).__name__}: {error}"
            return self
        self._thread = threading.Thread(target=self._run, name="load-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.seconds = time.perf_counter() - self._started
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._sample()  # the last partial interval
        with contextlib.suppress(OSError):
            self.load_after = os.getloadavg()[0]

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s) and self.error is None:
            self._sample()

    def _sample(self) -> None:
        try:
            now = (time.perf_counter(), _machine_busy_seconds(), _own_cpu_seconds())
        except Exception as error:  # noqa: BLE001 - a load it cannot read never fails a trial
            self.error = f"{type(error).__name__}: {error}"
            return
        elapsed = now[0] - self._last[0]
        if elapsed > 0:
            machine = (now[1] - self._last[1]) / elapsed
            own = (now[2] - self._last[2]) / elapsed
            self.busy.append(machine)
            self.others.append(max(0.0, machine - own))
        self._last = now

    def summary(self) -> MachineLoad | None:
        """The record's `machine_load`: cores, the load average (1 min) before and after, the
        cores the machine used and those other processes used (mean and max over the samples);
        None when nothing could be read."""
        if not self.others:
            return None
        others, busy = self.others, self.busy
        return MachineLoad(
            cores=psutil.cpu_count() or 1,
            other_cores=Spread(sum(others) / len(others), max(others)),
            busy_cores=Spread(sum(busy) / len(busy), max(busy)),
            load_average_1m={"before": self.load_before, "after": self.load_after},
            seconds=self.seconds,
        )


def is_busy(load: MachineLoad | None) -> bool:
    """Whether other processes held `BUSY_SHARE` of the cores or more, on average, while the
    trial measured (False for records from before it was recorded)."""
    return load is not None and load.cores > 0 and load.other_cores.mean >= BUSY_SHARE * load.cores


def busy_text(load: MachineLoad) -> str:
    """ "others used 1.1 of 2 cores" """
    return f"others used {load.other_cores.mean:.1f} of {load.cores} cores"
