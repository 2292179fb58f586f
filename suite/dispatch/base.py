"""What every host kind is: `Host`, the interface `dispatch` runs a spec through, and `SpecRun`,
what it runs on every host of one `inv run`.

A host either runs the spec through this process's runner (native; Slurm, whose trial processes
are jobs), recording the trials itself, or runs it apart (a Docker container running the suite's
own `inv run`), whose records come back into the results directory and whose end is an outcome
(`HostOutcome`) the run counts. Class methods see all the hosts of one kind in a run: what they
have to say at the start, the resume marker a kind that runs apart needs, and what an interruption
stopped on them.
"""

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from suite.hosts.docker import HostOutcome
from suite.running.resume import UnfinishedRun
from suite.specs import Spec


@dataclass
class SpecRun:
    """One spec on every chosen host: the same spec file with the same overrides, so every trial
    has one spec hash wherever it runs, recorded into `results` as one run (`run_id`)."""

    spec: Spec
    results: Path
    overrides: dict = field(default_factory=dict)  # resolution, batch, steps, precision
    force: bool = False
    run_id: str | None = None  # None: each host that records itself continues its own run
    echo: Callable[[str], None] = print
    # a directory of this machine lent to every LMS trial's host store (`--host-disk`, checked);
    # a place of the host, not a parameter of the trial: not in the spec hash
    host_disk: Path | None = None


class Host(ABC):
    """One place a spec runs. Subclasses: `NativeHost`, `DockerHost`, `SlurmHost`; which one an
    invoke.yaml entry is, is decided in suite/dispatch/kinds.py only (a configurable kind also
    has `from_config(name, settings, default_image)`)."""

    kind: ClassVar[str]  # its name in messages and in kinds.KINDS
    name: str  # the name its records are filed under

    @property
    def title(self) -> str:
        """How the run's lines name it."""
        return self.name

    @property
    def on_this_machine(self) -> bool:
        """Its trials use this machine's cores: it takes turns (rounds) with the other places
        here, since running them at once would slow each and the ratio between them would
        measure that."""
        return False

    @property
    def in_thread(self) -> bool:
        """It may run in a thread of its own while the main thread runs others: `stop()` reaches
        it. Hosts that run the runner here need the main thread (signals reach only it)."""
        return False

    def check(self, job: SpecRun) -> None:
        """Refuse (a SuiteError), before anything runs on any host, what this host cannot run as
        `job` asks. By default it runs whatever the spec and options allow."""
        return None

    @abstractmethod
    def run(self, job: SpecRun, round_: int | None = None) -> HostOutcome | None:
        """Run the spec (only every trial's `round_`-th process if given). An outcome when the
        host runs apart (it never raises for the host's own failures); None when this process
        recorded the trials itself."""

    def stop(self, signal_name: str) -> None:
        """The run is interrupted: stop what this host runs apart from the main thread now."""
        return None  # by default nothing does: the signal itself stops the main thread's work

    def settle(self, timeout: float) -> bool:
        """After `stop`: wait up to `timeout` s until what it ran apart has ended and what
        finished is kept; True once it has."""
        return True

    @classmethod
    def announce(cls, hosts: list, job: SpecRun) -> str | None:
        """A line saying where the spec runs on `hosts` (all of this kind), said before any runs."""
        return None

    @classmethod
    def marker(cls, hosts: list, job: SpecRun) -> UnfinishedRun | None:
        """The resume marker this process keeps for `hosts` (all of this kind), or None when
        they keep their own (the runner keeps one per host: suite/running/resume.py)."""
        return None

    @classmethod
    def interrupted(cls, hosts: list, job: SpecRun) -> str | None:
        """What an interruption stopped and kept on `hosts` (all of this kind), for the run's last
        line; None when the runner's own line says it all."""
        return None
