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

import threading
import uuid
from pathlib import Path

from suite.hosts.docker import (
    HostOutcome,
    choose_hosts,
    hosts_for_images,
    outcome_line,
    run_arguments,
    run_on_hosts,
)
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
    outcomes, lock = [], threading.Lock()

    def run_remote():
        found = run_on_hosts(remote, Path(spec.source), run_arguments(overrides, force), results,
                             echo)  # fmt: skip
        with lock:
            outcomes.extend(found)

    thread = threading.Thread(target=run_remote) if remote else None
    if thread:
        thread.start()
    if round_ is None and here + len(shared) > 1:  # places on this machine: in turn, by rounds
        rounds = max((t.repeats for t in spec.trials), default=1)
        run_id = uuid.uuid4().hex[:12]  # the rounds make one run (inv regress groups by it)
        merged = {h.name: HostOutcome(h.name, True) for h in shared}
        for round_ in range(1, rounds + 1):
            echo(f"round {round_}/{rounds}: {'this machine, ' if here else ''}"
                 f"{', '.join(h.name for h in shared)} in turn")  # fmt: skip
            if here:
                echo("\n".join(summary_lines(run_spec(spec, results, host, force, echo=echo,
                                                      round_=round_, run_id=run_id))))  # fmt: skip
            for docker_host in shared:
                args = run_arguments(overrides, force, round_=round_, run_id=run_id)
                (outcome,) = run_on_hosts([docker_host], Path(spec.source), args, results, echo)
                total = merged[docker_host.name]
                total.ok, total.records = total.ok and outcome.ok, total.records + outcome.records
                total.seconds += outcome.seconds
                total.reason = total.reason or outcome.reason
        with lock:
            outcomes.extend(merged.values())
    else:
        if here:
            echo("\n".join(summary_lines(run_spec(spec, results, host, force, echo=echo,
                                                  round_=round_, run_id=run_id))))  # fmt: skip
        if shared:
            found = run_on_hosts(shared, Path(spec.source),
                                 run_arguments(overrides, force, round_=round_, run_id=run_id),
                                 results,
                                 echo)  # fmt: skip
            with lock:
                outcomes.extend(found)
    for cluster in clusters:
        echo(f"running {spec.name} as Slurm jobs on {cluster.name}")
        echo("\n".join(summary_lines(run_spec(spec, results, cluster.name, force, echo=echo,
                                              run_id=run_id, place=cluster))))  # fmt: skip
    if thread:
        thread.join()
    if outcomes:
        echo("\n".join(outcome_line(o) for o in outcomes))
    return sum(not o.ok for o in outcomes), len(outcomes)
