"""Where `inv run` runs a spec: on hosts of three kinds, one class each behind `base.Host` —
this machine natively (`native.py`), Docker engines, local or over SSH (`docker.py`), Slurm
clusters whose trials become jobs (`slurm.py`) — chosen from invoke.yaml in `kinds.py` only.
Every host runs the same spec file with the same overrides, so every trial has one spec hash
wherever it ran.

Places that share this machine (native, the local daemon, SSH to loopback) would slow each other
if run at once, and a ratio between them would measure that. They run in rounds instead: round r
runs every trial's r-th process at each place in turn. Remote engines run concurrently meanwhile,
each in a thread; the other hosts (Slurm) run in the main thread after this machine's rounds.
"""

import contextlib
import threading
import time
from dataclasses import replace
from pathlib import Path

from suite.dispatch.base import Host, SpecRun
from suite.dispatch.kinds import choose_hosts
from suite.hosts.docker import STOP_SECONDS, HostOutcome, outcome_line
from suite.records import writable_directory
from suite.running.interrupts import RunInterrupted, interruptible
from suite.running.runner import host_disk_option
from suite.specs import load_spec
from suite.units import positive_int


def run_command(
    settings,
    overrides: dict,
    spec: str | None = None,
    results=None,
    hosts: str | None = None,
    native: bool = False,
    label: str | None = None,
    host_disk=None,
    force: bool = False,
    run_id: str | None = None,
    round_=None,
) -> tuple[int, int]:
    """`inv run`: `spec` (a name or a path, with `overrides`) on the hosts `choose_hosts` picks,
    recorded in `results`, with `host_disk` lent to every LMS trial; `settings` is invoke.yaml's
    `suite` (the defaults: spec, results, hosts, image, built, host_disk). Checked first, before
    any host runs: the spec, the results directory, the disk, the hosts, the round. Returns
    `dispatch`'s (hosts whose run apart failed, hosts that run apart)."""
    loaded = load_spec(spec or settings.spec, overrides)
    results = writable_directory(Path(results or settings.results), "--results")
    disk = host_disk_option(host_disk or settings.get("host_disk"))
    configured, built = settings.get("hosts"), settings.get("built")
    places = choose_hosts(hosts, configured, settings.image, built, native, label=label)
    job = SpecRun(loaded, results, overrides, force, run_id, host_disk=disk)
    return dispatch(job, places, round_=parse_round(round_))


def parse_round(value) -> int | None:
    """`inv run --round N` (text from the command line): an integer >= 1, or None."""
    return None if value is None else positive_int("round", value)


def dispatch(job: SpecRun, hosts: list[Host], round_: int | None = None) -> tuple[int, int]:
    """Run `job` on `hosts`; (hosts whose run apart failed, hosts that run apart). `round_`: only
    that round (inside a container of an interleaved run)."""
    say, printing, lock = job.echo, threading.Lock(), threading.Lock()

    def echo(line: str) -> None:  # hosts apart print from their threads
        with printing:
            say(line)

    job = replace(job, echo=echo)  # this run's own: its run id is set below
    for host in hosts:
        host.check(job)
    kinds = {}  # each kind's hosts, in the order named
    for host in hosts:
        kinds.setdefault(type(host), []).append(host)
    for kind, group in kinds.items():
        if line := kind.announce(group, job):
            job.echo(line)
    # a kind whose hosts cannot keep their own marker gets one here: its rounds make one run,
    # which a rerun after an interruption continues, and every host takes its run id
    markers = [m for kind, group in kinds.items() if (m := kind.marker(group, job))]
    if markers and round_ is None and job.run_id is None:
        job.run_id, _ = markers[0].begin(fresh=job.force)
    else:
        markers = []
    outcomes = {}

    def ran(host: Host, outcome: HostOutcome | None) -> None:
        if outcome is not None:
            with lock:
                outcomes[host.name] = _merged(outcomes.get(host.name), outcome)

    apart = [h for h in hosts if h.in_thread]
    here = [h for h in hosts if h.on_this_machine]
    rest = [h for h in hosts if not (h.in_thread or h.on_this_machine)]
    threads = [threading.Thread(target=lambda h=h: ran(h, h.run(job, round_))) for h in apart]
    with _stopping(hosts, kinds, job):
        for thread in threads:
            thread.start()
        interleave = round_ is None and len(here) > 1
        rounds = max((t.repeats for t in job.spec.trials), default=1)
        for number in range(1, rounds + 1) if interleave else [round_]:
            if interleave:
                names = ", ".join(h.title for h in here)
                job.echo(f"round {number}/{rounds}: {names} in turn")
            for host in here:
                ran(host, host.run(job, number))
        for host in rest:
            ran(host, host.run(job, round_))
        for thread in threads:
            thread.join()
    found = [outcomes[h.name] for h in hosts if h.name in outcomes]
    if markers and all(o.ok for o in found):  # completed: a rerun is a new run
        markers[0].finish()
    if found:
        job.echo("\n".join(outcome_line(o) for o in found))
    return sum(not o.ok for o in found), len(found)


def _merged(total: HostOutcome | None, outcome: HostOutcome) -> HostOutcome:
    """One host's outcome over its rounds (a new one: the host keeps its rounds' own)."""
    total = total or HostOutcome(outcome.host, True)
    total.ok = total.ok and outcome.ok
    total.records += outcome.records
    total.seconds += outcome.seconds
    total.reason = total.reason or outcome.reason
    return total


@contextlib.contextmanager
def _stopping(hosts: list[Host], kinds: dict, job: SpecRun):
    """SIGINT and SIGTERM raise `RunInterrupted` inside. Whatever ends the run early, every host
    stops what it runs apart, and keeps what finished, before the run ends (a second Ctrl-C does
    not cut that short); an interruption then says in its one line what was stopped and kept."""
    with interruptible():
        try:
            yield
        except BaseException as error:
            signal_name = getattr(error, "signal_name", "SIGINT")
            for host in hosts:
                host.stop(signal_name)
            deadline = time.monotonic() + STOP_SECONDS
            for host in hosts:
                while time.monotonic() < deadline:
                    try:
                        if host.settle(max(0.0, deadline - time.monotonic())):
                            break
                    except RunInterrupted:
                        continue
            notes = [n for kind, group in kinds.items() if (n := kind.interrupted(group, job))]
            if isinstance(error, RunInterrupted) and notes:
                message = "; ".join([str(error), *notes])
                raise RunInterrupted(error.signal_name, message) from None
            raise


__all__ = ["SpecRun", "choose_hosts", "dispatch", "parse_round", "run_command"]
