"""How busy the machine was while a trial measured: what other processes used of its cores.

The trial's own rate says how fast it ran, not why: a step slowed by a compile job beside it looks
like a slower suite. So the trial process samples, while its steps run, the machine's busy cores
(psutil's CPU times of the whole machine) and its own (its process and any children), and keeps
the difference: the cores other processes took. The load average is kept too (it counts the
trial's own threads, so it reads only beside the core count). The report flags a measurement
taken while others held `BUSY_SHARE` of the cores or more (`is_busy`).
"""

import os
import threading
import time

import psutil

BUSY_SHARE = 0.25  # others held a quarter of the cores: on 2 cores, half a core on average
INTERVAL_S = 0.5


def _own_cpu_seconds(process: psutil.Process) -> float:
    """CPU seconds of `process` and its children (a replicated trial's workers)."""
    total = 0.0
    for member in [process, *process.children(recursive=True)]:
        try:
            times = member.cpu_times()
        except psutil.Error:  # a child that ended between listing and reading
            continue
        total += times.user + times.system
    return total


def _machine_busy_seconds() -> float:
    times = psutil.cpu_times()
    return times.user + times.system + getattr(times, "nice", 0.0) + getattr(times, "irq", 0.0)


class LoadMonitor:
    """Samples, in a thread, the cores other processes used between start and stop.

    with LoadMonitor() as load:
        ...  # the measured steps
    metrics["machine_load"] = load.summary()
    """

    def __init__(self, interval_s: float = INTERVAL_S):
        self.interval_s = interval_s
        self.process = psutil.Process()
        self.others: list[float] = []  # cores other processes used, per interval
        self.busy: list[float] = []  # cores the whole machine used, per interval
        self._stop = threading.Event()
        self._thread = None
        self.load_before = self.load_after = None
        self.seconds = 0.0

    def __enter__(self) -> "LoadMonitor":
        self.load_before = os.getloadavg()[0]
        self._started = time.perf_counter()
        self._last = (time.perf_counter(), _machine_busy_seconds(), _own_cpu_seconds(self.process))
        self._thread = threading.Thread(target=self._run, name="load-monitor", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()  # the last partial interval
        self.load_after = os.getloadavg()[0]
        self.seconds = time.perf_counter() - self._started

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def _sample(self) -> None:
        now = (time.perf_counter(), _machine_busy_seconds(), _own_cpu_seconds(self.process))
        elapsed = now[0] - self._last[0]
        if elapsed > 0:
            machine = (now[1] - self._last[1]) / elapsed
            own = (now[2] - self._last[2]) / elapsed
            self.busy.append(machine)
            self.others.append(max(0.0, machine - own))
        self._last = now

    def summary(self) -> dict:
        """The record's `machine_load`: cores, the load average (1 min) before and after, the
        cores the machine used and those other processes used (mean and max over the samples)."""
        others, busy = self.others or [0.0], self.busy or [0.0]
        return {
            "cores": psutil.cpu_count() or 1,
            "load_average_1m": {"before": self.load_before, "after": self.load_after},
            "busy_cores": {"mean": sum(busy) / len(busy), "max": max(busy)},
            "other_cores": {"mean": sum(others) / len(others), "max": max(others)},
            "seconds": self.seconds,
        }


def is_busy(load: dict | None) -> bool:
    """Whether other processes held `BUSY_SHARE` of the cores or more, on average, while the
    trial measured (False for records from before it was recorded)."""
    if not isinstance(load, dict):
        return False
    others = (load.get("other_cores") or {}).get("mean")
    cores = load.get("cores")
    if not isinstance(others, int | float) or not isinstance(cores, int | float) or cores <= 0:
        return False
    return others >= BUSY_SHARE * cores


def busy_text(load: dict) -> str:
    """ "others used 1.1 of 2 cores" """
    return f"others used {load['other_cores']['mean']:.1f} of {load['cores']} cores"
