"""`inv run --hosts A,B`: one spec on several Docker hosts at once, through the docker SDK. A host
here is an `Engine`: what these functions read of a Docker host (suite/dispatch/docker.py's
`DockerHost` is one: its name, engine URL, image, gpus, client()).

Per host, in its own thread: connect (a local socket or `ssh://user@host`, whose host key must
already be in ~/.ssh/known_hosts: the SDK's paramiko transport rejects unknown keys), check the
image, sweep what a killed earlier run left (suite/hosts/volumes.py), create a volume for
/results seeded with the spec and the host's earlier records (so recorded trials are skipped),
run the suite's own `inv run` in a container (non-root, `--network none`, GPUs by DeviceRequest
where configured), stream its output, copy its records out as they finish, and remove the
container and volume. One host failing (unreachable, no image, crashed container) is reported
with its reason and does not touch the others.

Stopping: signals reach only the main thread, which stops every container of the run at once
(`ContainerRuns.stop`); each host's thread then copies out what finished and cleans up. If this
process dies without a word (SIGKILL), the container notices by itself: it runs with its stdin
attached to this process (`TETHER`), and the daemon closes that stdin when the connection drops.
"""

import contextlib
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from suite.errors import SuiteError
from suite.hosts.description import IMAGE_DIGEST_VARIABLE
from suite.hosts.volumes import (
    CONTAINER_DISK,
    CONTAINER_RESULTS,
    RecordsWatch,
    copy_out,
    run_labels,
    seed_files,
    sweep_volumes,
    tar_files,
)

CONTAINER_USER = "1000:1000"  # the image's `lms` user
# The container's command runs under this `sh -c` script, PID 1: the run reads nothing, a
# watcher reads the attached stdin, and at its end (this process closed the attach, or died and
# the daemon closed it; over SSH too) kills the run. When PID 1 exits, the kernel kills every
# other process of the container (trial processes in their own sessions too). Without job
# control sh gives background jobs /dev/null as stdin, hence fd 3.
TETHER = """exec 3<&0 </dev/null
"$@" 3<&- &
run=$!
{ cat <&3 >/dev/null; kill -KILL "$run"; } &
exec 3<&-
wait "$run"
"""
STOP_SECONDS = 120  # how long an interrupted run waits for its hosts to copy out and clean up


class Engine(Protocol):
    """A Docker host as these functions use it. The host kind (suite/dispatch/docker.py's
    `DockerHost`) is a later layer: it hands its objects down, never imported from here."""

    name: str  # the name its records are filed under
    url: str  # "local", unix://..., tcp://..., ssh://user@host[:port]
    image: str
    gpus: bool

    def client(self): ...  # a docker.DockerClient of the engine


def run_arguments(
    overrides: dict, force: bool, round_: int | None = None, run_id: str | None = None
) -> list[str]:
    """`inv run`'s arguments inside each container: the same overrides, so the same hashes;
    `round_` r: only every trial's r-th process (interleaving places that share a machine);
    `run_id`: the run the records belong to (the rounds make one run, a resumed run continues)."""
    args = [f"--{k}={v}" for k, v in overrides.items() if v is not None]
    args += [f"--round={round_}"] if round_ is not None else []
    args += [f"--run-id={run_id}"] if run_id else []
    return args + (["--force"] if force else [])


@dataclass
class HostOutcome:
    host: str
    ok: bool
    reason: str = ""
    records: int = 0
    seconds: float = 0.0
    image_id: str | None = None
    stopped: bool = False  # the run was interrupted: its container was killed


class ContainerRuns:
    """The containers of one `inv run`. Signals reach only the main thread, while each host runs
    in a thread of its own: the main thread stops them all here at once (`stop`), then waits
    until every host's thread has copied out what finished and removed its volume (`wait`)."""

    def __init__(self):
        self.outcomes: list[HostOutcome] = []  # of the hosts that returned
        self.stopping = False
        self._live = {}  # container id -> running container
        self._active = 0  # hosts whose run_on_host has not returned
        self._changed = threading.Condition()

    @contextlib.contextmanager
    def hosting(self):
        with self._changed:
            self._active += 1
        try:
            yield
        finally:
            with self._changed:
                self._active -= 1
                self._changed.notify_all()

    def start(self, container) -> bool:
        """Start `container`, unless the run is stopping (then False)."""
        with self._changed:
            if self.stopping:
                return False
            container.start()
            self._live[container.id] = container
            return True

    def ended(self, container, outcome: HostOutcome | None = None) -> None:
        with self._changed:
            self._live.pop(getattr(container, "id", None), None)
            if outcome is not None:
                self.outcomes.append(outcome)

    def stop(self) -> None:
        """Kill every running container of the run (their processes die with them); start no
        new one."""
        with self._changed:
            self.stopping = True
            live = list(self._live.values())
        for container in live:
            with contextlib.suppress(Exception):  # it may just have ended by itself
                container.kill()

    def wait(self, timeout: float = STOP_SECONDS) -> bool:
        """Until every host has returned (True), or `timeout` seconds."""
        with self._changed:
            return self._changed.wait_for(lambda: self._active == 0, timeout)


def _close(attached) -> None:
    """Close an attach socket (a socket's file object locally, a paramiko channel over SSH)."""
    for part in (attached, getattr(attached, "_sock", None)):
        if part is not None:
            with contextlib.suppress(Exception):
                part.close()


def _connect(host: Engine):
    """The host's client and its image; a clear reason when either is missing."""
    import docker

    try:
        client = host.client()
        client.ping()
    except Exception as error:
        hint = " (start one here with `bash scripts/docker.sh`)" if host.url == "local" else ""
        raise SuiteError(f"unreachable ({host.url}){hint}: {error}") from None
    try:
        return client, client.images.get(host.image)
    except docker.errors.ImageNotFound:
        client.close()
        raise SuiteError(
            f"image {host.image} is not on {host.url}: build it there "
            "(inv build) or set suite.hosts.<name>.image"
        ) from None


def _create_container(client, host: Engine, image, volume, run_args: list[str], labels, disk=None):
    """The suite's own `inv run` under the tether, non-root, without a network, /results on
    `volume`; with `disk` (a directory of the engine's machine, `inv run --host-disk`) bound at
    CONTAINER_DISK and handed to that run as its `--host-disk` (the container's user must be
    able to write there: that run checks it before any trial)."""
    import docker

    requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
    spec = f"{CONTAINER_RESULTS}/spec.toml"
    volumes = {volume.name: {"bind": CONTAINER_RESULTS, "mode": "rw"}}
    if disk is not None:
        volumes[str(disk)] = {"bind": CONTAINER_DISK, "mode": "rw"}
        run_args = [*run_args, f"--host-disk={CONTAINER_DISK}"]
    return client.containers.create(
        image.id,
        entrypoint=["sh", "-c", TETHER, "tether", *(image.attrs["Config"]["Entrypoint"] or [])],
        command=["run", "--spec", spec, "--results", CONTAINER_RESULTS, "--host", host.name]
        + run_args,
        stdin_open=True,  # the tether (the SDK adds StdinOnce: stdin closes when we are gone)
        network_mode="none",
        user=CONTAINER_USER,
        volumes=volumes,
        # unbuffered: the container's lines reach `echo` as they are printed (a pipe would hold
        # them until the run ends: minutes under qemu)
        environment={IMAGE_DIGEST_VARIABLE: image.id, "PYTHONUNBUFFERED": "1"},
        device_requests=requests if host.gpus else None,
        labels=labels,
    )


class _HostRun:
    """One host's container from creation to removal (`run_on_host`)."""

    def __init__(self, host: Engine, results_dir: Path, runs: ContainerRuns, echo):
        self.host, self.results_dir, self.runs, self.echo = host, Path(results_dir), runs, echo
        self.outcome = HostOutcome(host.name, False)
        self.client = self.container = self.volume = None
        self.tether = self.attached = None  # a client of its own, and its attach to stdin
        self.copied = False  # the final copy-out is done: the volume holds nothing more of ours

    def run(self, spec_text: str, run_args: list[str], disk=None) -> None:
        host, outcome = self.host, self.outcome
        self.client, image = _connect(host)
        outcome.image_id = image.id
        outcome.records += sweep_volumes(
            self.client, host.name, image.id, self.results_dir, self.echo
        )
        labels = run_labels(host.name, self.results_dir)
        self.volume = self.client.volumes.create(
            name=f"lms-results-{host.name}-{uuid.uuid4().hex[:8]}", labels=labels
        )
        container = self.container = _create_container(
            self.client, host, image, self.volume, run_args, labels, disk
        )
        seeds = seed_files(self.results_dir, host.name, spec_text)
        container.put_archive(CONTAINER_RESULTS, tar_files(seeds))
        # its own connection: over SSH every request path takes a session of the connection
        # (docker-py pools by URL), and sshd allows 10 (MaxSessions) that the run's requests,
        # log stream and a kill from the main thread nearly fill
        self.tether = host.client()
        self.attached = self.tether.api.attach_socket(container.id, {"stdin": 1, "stream": 1})
        if not self.runs.start(container):
            self.copied, outcome.stopped = True, True  # it never ran: nothing to copy out
            raise SuiteError("stopped before its container started")
        with RecordsWatch(container, self.results_dir, host.name) as watch:
            for line in container.logs(stream=True, follow=True):
                for text in line.decode(errors="replace").splitlines():
                    self.echo(f"[{host.name}] {text}")
            status = container.wait().get("StatusCode")
        outcome.records += watch.records + copy_out(container, self.results_dir, host.name)
        self.copied = True
        if status != 0 and self.runs.stopping:
            outcome.stopped = True
            raise SuiteError("stopped: its container was killed")
        if status != 0:
            raise SuiteError(f"the run in the container exited with {status}")
        outcome.ok = True

    def clean_up(self) -> None:
        """Copy out what finished if an error came first; remove the container and volume once
        nothing of ours is left in them (else the next run on the host sweeps the volume)."""
        _close(self.attached)
        if self.container is not None and not self.copied:
            with contextlib.suppress(Exception):
                self.outcome.records += copy_out(self.container, self.results_dir, self.host.name)
                self.copied = True
        if self.container is not None and not self.copied:
            self.echo(
                f"[{self.host.name}] volume {self.volume.name} kept: its records could "
                "not be copied out; the next run on this host takes them"
            )
        else:
            self._remove()
        for client in (self.tether, self.client):
            if client is not None:
                client.close()

    def _remove(self) -> None:
        try:
            for thing in (self.container, self.volume):
                if thing is not None:
                    thing.remove(force=True)
        except Exception as error:
            self.echo(
                f"[{self.host.name}] volume {self.volume.name} left ({type(error).__name__}: "
                f"{error}); the next run on this host removes it"
            )


def run_on_host(
    host: Engine,
    spec_text: str,
    run_args: list[str],
    results_dir: Path,
    echo,
    runs: ContainerRuns | None = None,
    disk=None,
) -> HostOutcome:
    """Run the spec on one host; never raises for the host's own failures. Records are copied
    out as they finish; the container and volume are removed once what finished is out. `disk`:
    a directory lent to LMS in the container (`_create_container`)."""
    runs = runs if runs is not None else ContainerRuns()
    started = time.monotonic()
    one = _HostRun(host, results_dir, runs, echo)
    with runs.hosting():
        try:
            one.run(spec_text, run_args, disk)
        except SuiteError as error:
            one.outcome.reason = str(error)
        except Exception as error:  # the SDK's errors: API, connection, SSH
            one.outcome.reason = f"{type(error).__name__}: {error}"
        finally:
            one.clean_up()
            one.outcome.seconds = time.monotonic() - started
            runs.ended(one.container, one.outcome)
    return one.outcome


def outcome_line(outcome: HostOutcome) -> str:
    state = "ok" if outcome.ok else f"FAILED: {outcome.reason}"
    return f"host {outcome.host}: {state} ({outcome.records} new records, {outcome.seconds:.0f}s)"


def run_on_hosts(
    hosts: list[Engine],
    spec_path: Path,
    run_args: list[str],
    results_dir: Path,
    echo=print,
    runs: ContainerRuns | None = None,
    disk=None,
) -> list[HostOutcome]:
    """Run on every host concurrently; the outcomes in the order of `hosts`. If this thread is
    interrupted meanwhile, every container is stopped and its records copied out first. `disk`:
    a directory lent to LMS in every container (`_create_container`)."""
    runs = runs if runs is not None else ContainerRuns()
    spec_text = Path(spec_path).read_text()
    lock = threading.Lock()

    def locked_echo(line):
        with lock:
            echo(line)

    outcomes = [None] * len(hosts)

    def work(index, host):
        outcomes[index] = run_on_host(
            host, spec_text, run_args, Path(results_dir), locked_echo, runs, disk
        )

    threads = [threading.Thread(target=work, args=(i, h)) for i, h in enumerate(hosts)]
    for thread in threads:
        thread.start()
    try:
        for thread in threads:
            thread.join()
    except BaseException:  # a signal (KeyboardInterrupt, the suite's RunInterrupted)
        runs.stop()
        runs.wait()
        raise
    return outcomes
