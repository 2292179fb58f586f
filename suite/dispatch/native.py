"""This machine, outside any container: the runner runs the spec here, each trial in a process
of its own (suite/running/trial.py), and records it under this machine's name (or `--host`)."""

from dataclasses import dataclass

from suite.dispatch.base import Host, SpecRun
from suite.running.runner import run_spec, summary_lines


@dataclass
class NativeHost(Host):
    kind = "native"
    name: str | None = None  # `inv run --host`; None: this machine's hostname

    @property
    def title(self) -> str:
        return "this machine"

    @property
    def on_this_machine(self) -> bool:
        return True

    def run(self, job: SpecRun, round_: int | None = None) -> None:
        summary = run_spec(
            job.spec,
            job.results,
            self.name,
            job.force,
            echo=job.echo,
            run_id=job.run_id,
            round_=round_,
            host_disk=job.host_disk,
        )
        job.echo("\n".join(summary_lines(summary)))
