"""Where `inv run` runs a spec: natively on this machine, in containers on Docker hosts, or both.

`--hosts` names the hosts (Docker hosts, or Slurm clusters: `scheduler: slurm`, whose trials
become jobs, suite/running/slurm.py); without it, the images `inv build` built earlier in the
same invocation (`invoke build run report`) choose the hosts of invoke.yaml that run them; with
neither, the spec runs natively. `--native` adds this machine to the containers. Every place runs
the same spec file with the same overrides, so every trial has one spec hash wherever it ran.

Places that share this machine (native, the local daemon, SSH to loopback) would slow each other
if run at once, and a ratio between them would measure that. They run in rounds instead: round r
runs every trial's r-th process at each place in turn. Remote hosts run concurrently meanwhile.
"""

import contextlib
import threading
import time
from pathlib import Path

from suite.hosts.docker import (
    STOP_SECONDS,
    ContainerRuns,
    HostOutcome,
    choose_hosts,
    hosts_for_images,
    outcome_line,
    run_arguments,
    run_on_hosts,
)
from suite.running.interrupts import RunInterrupted, interruptible
from suite.running.resume import UnfinishedRun
from suite.running.runner import run_spec, summary_lines
from suite.running.slurm import slurm_hosts
from suite.specs import Spec
from suite.units import positive_int


def parse_round(value) -> int | None:
    """`inv run --round N` (text from the command line): an integer >= 1, or None."""
    return None if value is None else positive_int("round", value)


def dispatch(spec: Spec, overrides: dict, results: Path, *, host=None, force=False,
             hosts: str | None = None, native=False, configured: dict | None = None,
             default_image: str = "", built: list | None = None, round_: int | None = None,
             run_id: str | None = None, echo=print) -> tuple[int, int]:  # fmt: skip
    """Run `spec` where asked; return (Docker hosts that failed, Docker hosts). `round_`: only
    that round (inside a container of an interleaved run)."""
    configured = configured or {}
    names = [h.strip() for h in hosts.split(",") if h.strip()] if hosts else []
    clusters = slurm_hosts(names, configured)  # their trials become jobs
    containers = [n for n in names if n not in {c.name for c in clusters}]
    chosen = choose_hosts(",".join(containers), configured, default_image) if containers else None
    if chosen is None and built and not clusters:
        chosen = hosts_for_images(configured, default_image, list(built))
    chosen = chosen or []
    here = native or not (chosen or clusters)
    if chosen:
        hashes = ", ".join(t.hash for t in spec.trials[:3]) + (", ..." * (len(spec.trials) > 3))
        places = ", ".join(f"{h.name} ({h.image})" for h in chosen)
        echo(f"running {spec.name} [{hashes}] in containers on {places}")
    shared = [h for h in chosen if h.on_this_machine]
    remote = [h for h in chosen if not h.on_this_machine]
    outcomes, lock, runs = [], threading.Lock(), ContainerRuns()

    # the containers' records belong to one run, which a rerun after an interruption continues
    # (a container's own results start empty, so the marker is kept here)
    marker = None
    if chosen and round_ is None and run_id is None:
        names = "-".join(sorted(h.name for h in chosen))
        marker = UnfinishedRun(results, f"containers-{names}", spec)
        run_id, _ = marker.begin(fresh=force)

    def run_remote():
        found = run_on_hosts(remote, Path(spec.source), run_arguments(overrides, force,
                             run_id=run_id), results, echo, runs)  # fmt: skip
        with lock:
            outcomes.extend(found)

    def run_and_summarize(name, **where):  # natively here, or as Slurm jobs
        summary = run_spec(spec, results, name, force, echo=echo, run_id=run_id, **where)
        echo("\n".join(summary_lines(summary)))

    with _stopping_containers(runs, results):
        thread = threading.Thread(target=run_remote) if remote else None
        if thread:
            thread.start()
        if round_ is None and here + len(shared) > 1:  # places on this machine: in turn, by rounds
            rounds = max((t.repeats for t in spec.trials), default=1)
            merged = {h.name: HostOutcome(h.name, True) for h in shared}
            for round_ in range(1, rounds + 1):
                echo(f"round {round_}/{rounds}: {'this machine, ' if here else ''}"
                     f"{', '.join(h.name for h in shared)} in turn")  # fmt: skip
                if here:
                    run_and_summarize(host, round_=round_)
                for docker_host in shared:
                    args = run_arguments(overrides, force, round_=round_, run_id=run_id)
                    (outcome,) = run_on_hosts([docker_host], Path(spec.source), args, results,
                                              echo, runs)  # fmt: skip
                    total = merged[docker_host.name]
                    total.ok = total.ok and outcome.ok
                    total.records += outcome.records
                    total.seconds += outcome.seconds
                    total.reason = total.reason or outcome.reason
            with lock:
                outcomes.extend(merged.values())
        else:
            if here:
                run_and_summarize(host, round_=round_)
            if shared:
                args = run_arguments(overrides, force, round_=round_, run_id=run_id)
                found = run_on_hosts(shared, Path(spec.source), args, results, echo, runs)
                with lock:
                    outcomes.extend(found)
        for cluster in clusters:
            echo(f"running {spec.name} as Slurm jobs on {cluster.name}")
            run_and_summarize(cluster.name, place=cluster)
        if thread:
            thread.join()
    if marker is not None and all(o.ok for o in outcomes):  # completed: a rerun is a new run
        marker.finish()
    if outcomes:
        echo("\n".join(outcome_line(o) for o in outcomes))
    return sum(not o.ok for o in outcomes), len(outcomes)


@contextlib.contextmanager
def _stopping_containers(runs: ContainerRuns, results: Path):
    """SIGINT and SIGTERM raise `RunInterrupted` inside. Whatever ends the run early, every
    container of it is stopped on the way out, and what they finished is copied out first; an
    interruption then says in its one line what was stopped and kept."""
    with interruptible():
        try:
            yield
        except BaseException as error:
            runs.stop()
            deadline = time.monotonic() + STOP_SECONDS
            while time.monotonic() < deadline:
                try:  # a second Ctrl-C does not cut the copying out short
                    if runs.wait(max(0.0, deadline - time.monotonic())):
                        break
                except RunInterrupted:
                    continue
            if isinstance(error, RunInterrupted) and runs.outcomes:
                message = f"{error}; {runs.summary(results)}"
                raise RunInterrupted(error.signal_name, message) from None
            raise
