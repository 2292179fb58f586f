"""A Docker engine as a host: the spec runs in a container of the suite's image, through the
docker SDK (suite/hosts/docker.py: the container, its tether, its /results volume copied out).

SSH is not a kind of its own: a host over SSH is this class with an `ssh://user@host` URL. All
it does (check the image, create the volume and container, attach, copy out, remove) is the
Docker engine's API, the same calls over another transport, which docker-py picks from the URL
(unix://, tcp://, ssh://). What the URL changes is computed from it: whether the engine shares
this machine's cores (`on_this_machine`) and the hint when it cannot be reached.
"""

from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from suite.dispatch.base import Host, SpecRun
from suite.errors import SuiteError
from suite.hosts.docker import ContainerRuns, HostOutcome, run_arguments, run_on_hosts
from suite.records import check_host_name
from suite.running.resume import UnfinishedRun

KNOWN_KEYS = ("url", "image", "gpus")


@dataclass
class DockerHost(Host):
    kind = "docker"
    name: str
    url: str  # "local", unix://..., tcp://..., ssh://user@host[:port]
    image: str
    gpus: bool = False
    # the run's state, not configuration: its containers, which an interruption stops
    runs: ContainerRuns = field(
        default_factory=ContainerRuns, init=False, repr=False, compare=False
    )

    @classmethod
    def from_config(cls, name: str, settings: dict | None, default_image: str) -> "DockerHost":
        settings = dict(settings or {})
        if name.startswith("ssh://"):  # a bare URL on the command line
            settings.setdefault("url", name)
            name = name[len("ssh://") :].split("@")[-1].split(":")[0]
        unknown = set(settings) - set(KNOWN_KEYS)
        if unknown:
            raise SuiteError(
                f"invoke.yaml suite.hosts.{name}: unknown settings {sorted(unknown)}; a Docker "
                f"host takes {', '.join(KNOWN_KEYS)}"
            )
        check_host_name(name)
        return cls(
            name,
            settings.get("url", "local"),
            settings.get("image", default_image),
            bool(settings.get("gpus", False)),
        )

    @property
    def on_this_machine(self) -> bool:
        """Its daemon runs here (the local socket, or SSH or TCP to loopback)."""
        if self.url == "local" or self.url.startswith("unix://"):
            return True
        return urlparse(self.url).hostname in ("localhost", "127.0.0.1", "::1")

    @property
    def in_thread(self) -> bool:
        """A remote engine runs the spec meanwhile: its container streams back, a thread waits."""
        return not self.on_this_machine

    def client(self):
        import docker

        if self.url == "local":
            return docker.from_env(timeout=120)
        return docker.DockerClient(base_url=self.url, timeout=120)

    def check(self, job: SpecRun) -> None:
        """`--host-disk` names a directory of this machine, which the container binds: an engine
        on another machine would bind a path of its own machine, never checked here."""
        if job.host_disk is not None and not self.on_this_machine:
            raise SuiteError(
                f"--host-disk {job.host_disk}: a directory of this machine; host {self.name} is "
                f"a Docker engine on another machine ({self.url}), which cannot bind it; run "
                "there without --host-disk, or natively on that machine with a disk of its own"
            )

    def run(self, job: SpecRun, round_: int | None = None) -> HostOutcome:
        """The spec in a container, with `--host-disk` bound into it (`check`)."""
        args = run_arguments(job.overrides, job.force, round_=round_, run_id=job.run_id)
        spec, disk = Path(job.spec.source), job.host_disk
        (outcome,) = run_on_hosts([self], spec, args, job.results, job.echo, self.runs, disk)
        return outcome

    def stop(self, signal_name: str) -> None:
        self.runs.stop()

    def settle(self, timeout: float) -> bool:
        return self.runs.wait(timeout)

    @classmethod
    def announce(cls, hosts: list["DockerHost"], job: SpecRun) -> str:
        trials = job.spec.trials
        hashes = ", ".join(t.hash for t in trials[:3]) + (", ..." * (len(trials) > 3))
        places = ", ".join(f"{h.name} ({h.image})" for h in hosts)
        return f"running {job.spec.name} [{hashes}] in containers on {places}"

    @classmethod
    def marker(cls, hosts: list["DockerHost"], job: SpecRun) -> UnfinishedRun:
        """The containers' records belong to one run, which a rerun after an interruption
        continues; a container's own results start empty, so the marker is kept here."""
        names = "-".join(sorted(h.name for h in hosts))
        return UnfinishedRun(job.results, f"containers-{names}", job.spec)

    @classmethod
    def interrupted(cls, hosts: list["DockerHost"], job: SpecRun) -> str | None:
        outcomes = [o for h in hosts for o in h.runs.outcomes]
        if not outcomes:
            return None
        stopped = [o.host for o in outcomes if o.stopped]
        what = (
            f"stopped the containers on {', '.join(stopped)}"
            if stopped
            else "no container was running"
        )
        kept = sum(o.records for o in outcomes)
        return f"{what}; {kept} new records from containers kept in {job.results}"
