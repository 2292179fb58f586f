"""Where `inv run` runs a spec: natively on this machine, in containers on Docker hosts, or both.

`--hosts` names the hosts; without it, the images `inv build` built earlier in the same invocation
(`invoke build run report`) choose the hosts of invoke.yaml that run them; with neither, the spec
runs natively. `--native` adds this machine to the containers. Every place runs the same spec
file with the same overrides, so every trial has one spec hash wherever it ran.
"""

from pathlib import Path

from suite.hosts.docker import (
    choose_hosts,
    hosts_for_images,
    outcome_line,
    run_arguments,
    run_on_hosts,
)
from suite.running.runner import run_spec, summary_lines
from suite.specs import Spec


def dispatch(spec: Spec, overrides: dict, results: Path, *, host=None, force=False,
             hosts: str | None = None, native=False, configured: dict | None = None,
             default_image: str = "", built: list | None = None, echo=print) -> int:  # fmt: skip
    """Run `spec` where asked; return how many Docker hosts failed (0: all ran)."""
    configured = configured or {}
    chosen = choose_hosts(hosts, configured, default_image) if hosts else None
    if chosen is None and built:
        chosen = hosts_for_images(configured, default_image, list(built))
    if native or not chosen:
        echo("\n".join(summary_lines(run_spec(spec, results, host, force, echo=echo))))
    if not chosen:
        return 0
    hashes = ", ".join(t.hash for t in spec.trials[:3]) + (", ..." if len(spec.trials) > 3 else "")
    places = ", ".join(f"{h.name} ({h.image})" for h in chosen)
    echo(f"running {spec.name} [{hashes}] in containers on {places}")
    outcomes = run_on_hosts(chosen, Path(spec.source), run_arguments(overrides, force), results,
                            echo)  # fmt: skip
    echo("\n".join(outcome_line(o) for o in outcomes))
    return sum(not o.ok for o in outcomes)
