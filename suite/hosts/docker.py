"""`inv run --hosts A,B`: one spec on several Docker hosts at once, through the docker SDK.

Per host, in its own thread: connect (a local socket or `ssh://user@host`, whose host key must
already be in ~/.ssh/known_hosts: the SDK's paramiko transport rejects unknown keys), check the
image, create a volume for /results, copy in the spec and the host's earlier records (so that
recorded trials are skipped), run the suite's own `inv run` in a container (non-root,
`--network none`, GPUs by DeviceRequest where configured), stream its output, copy /results back
and merge it into this checkout's results. One host failing (unreachable, no image, crashed
container) is reported with its reason and does not touch the others.
"""

import contextlib
import io
import shutil
import tarfile
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from suite.errors import SuiteError
from suite.hosts.description import IMAGE_DIGEST_VARIABLE
from suite.records import (
    append_record,
    check_host_name,
    load_records,
    predictions_file,
    results_file,
    searches_file,
    shared_folders,
    validate_prediction,
    validate_search_record,
)

CONTAINER_RESULTS = "/results"
CONTAINER_USER = "1000:1000"  # the image's `lms` user


@dataclass
class DockerHost:
    name: str
    url: str  # "local", unix://..., tcp://..., ssh://user@host[:port]
    image: str
    gpus: bool = False

    @classmethod
    def from_config(cls, name: str, settings: dict | None, default_image: str) -> "DockerHost":
        settings = dict(settings or {})
        if name.startswith("ssh://"):  # a bare URL on the command line
            settings.setdefault("url", name)
            name = name[len("ssh://") :].split("@")[-1].split(":")[0]
        unknown = set(settings) - {"url", "image", "gpus"}
        if unknown:
            raise SuiteError(f"invoke.yaml suite.hosts.{name}: unknown settings {sorted(unknown)}; "
                             "allowed: url, image, gpus")  # fmt: skip
        check_host_name(name)
        return cls(name, settings.get("url", "local"), settings.get("image", default_image),
                   bool(settings.get("gpus", False)))  # fmt: skip

    @property
    def on_this_machine(self) -> bool:
        """Its daemon runs here (the local socket, or SSH or TCP to loopback): its trials share
        this machine's cores with anything else run here, so runs here are interleaved."""
        if self.url == "local" or self.url.startswith("unix://"):
            return True
        return urlparse(self.url).hostname in ("localhost", "127.0.0.1", "::1")

    def client(self):
        import docker

        if self.url == "local":
            return docker.from_env(timeout=120)
        return docker.DockerClient(base_url=self.url, timeout=120)


def choose_hosts(names: str, configured: dict, default_image: str) -> list[DockerHost]:
    """The hosts of `inv run --hosts a,b,...`: names in invoke.yaml suite.hosts, or ssh:// URLs."""
    chosen = []
    for name in [h.strip() for h in names.split(",") if h.strip()]:
        if name not in configured and not name.startswith("ssh://"):
            known = ", ".join(configured) or "none"
            raise SuiteError(f"host {name!r} is not in invoke.yaml suite.hosts (known: {known}) "
                             "and is not an ssh:// URL")  # fmt: skip
        chosen.append(DockerHost.from_config(name, configured.get(name), default_image))
    if not chosen:
        raise SuiteError(f"--hosts {names!r} names no host")
    return chosen


def hosts_for_images(configured: dict, default_image: str, built: list[str]) -> list[DockerHost]:
    """`inv build run`: the hosts of invoke.yaml whose image was just built (those that can run
    it: a host's image is its own `image`, else suite.image)."""
    hosts = [DockerHost.from_config(name, settings, default_image)
             for name, settings in configured.items()]  # fmt: skip
    chosen = [host for host in hosts if host.image in built]
    if not chosen:
        raise SuiteError(f"no host in invoke.yaml suite.hosts runs the image(s) just built "
                         f"({', '.join(built)}); set suite.hosts.<name>.image")  # fmt: skip
    return chosen


def run_arguments(overrides: dict, force: bool, round_: int | None = None,
                  run_id: str | None = None) -> list[str]:  # fmt: skip
    """`inv run`'s arguments inside each container: the same overrides, so the same hashes;
    `round_` r: only every trial's r-th process, under `run_id` (interleaving places that share
    a machine: the rounds make one run)."""
    args = [f"--{k}={v}" for k, v in overrides.items() if v is not None]
    args += [f"--round={round_}", f"--run-id={run_id}"] if round_ is not None else []
    return args + (["--force"] if force else [])


@dataclass
class HostOutcome:
    host: str
    ok: bool
    reason: str = ""
    records: int = 0
    seconds: float = 0.0
    image_id: str | None = None


def _tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.uid, info.gid, info.mode = len(data), 1000, 1000, 0o644
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def _seed_files(results_dir: Path, host: str, spec_text: str) -> dict[str, bytes]:
    """The spec and this host's earlier records, for the container's /results."""
    files = {"spec.toml": spec_text.encode()}
    for path in (results_file(results_dir, host), searches_file(results_dir, host),
                 predictions_file(results_dir, host)):  # fmt: skip
        if path.exists():
            files[str(path.relative_to(results_dir))] = path.read_bytes()
    return files


def merge_results(source: Path, results_dir: Path, host: str) -> int:
    """Merge a container's results into `results_dir`: new records appended, host descriptions
    and logs copied. Returns the number of new trial records."""
    added = 0
    kinds = (
        # a forced re-run (`inv run --force`, e.g. nightly) is a new run of the same trials
        (results_file, None, lambda r: (r["spec_hash"], r["repeat"], r.get("run"))),
        (searches_file, validate_search_record, lambda r: r["search_hash"]),
        (predictions_file, validate_prediction, lambda r: r["search_hash"]),
    )
    for locate, validate, key in kinds:
        theirs = locate(source, host)
        if not theirs.exists():
            continue
        ours = locate(results_dir, host)
        known = {key(r) for r in load_records(ours, validate)}
        for record in load_records(theirs, validate):
            if key(record) not in known:
                append_record(ours, record, validate)
                known.add(key(record))
                added += locate is results_file
    for folder in shared_folders(host):
        if (source / folder).is_dir():
            shutil.copytree(source / folder, results_dir / folder, dirs_exist_ok=True)
    return added


def run_on_host(host: DockerHost, spec_text: str, run_args: list[str], results_dir: Path,
                echo) -> HostOutcome:  # fmt: skip
    """Run the spec on one host; never raises for the host's own failures."""
    import docker

    started = time.monotonic()
    outcome = HostOutcome(host.name, False)
    client = container = volume = None
    try:
        try:
            client = host.client()
            client.ping()
        except Exception as error:
            hint = " (start one here with `bash scripts/docker.sh`)" if host.url == "local" else ""
            raise SuiteError(f"unreachable ({host.url}){hint}: {error}") from None
        try:
            image = client.images.get(host.image)
        except docker.errors.ImageNotFound:
            raise SuiteError(f"image {host.image} is not on {host.url}: build it there "
                             "(inv build) or set suite.hosts.<name>.image") from None  # fmt: skip
        outcome.image_id = image.id
        volume = client.volumes.create(name=f"lms-results-{host.name}-{uuid.uuid4().hex[:8]}")
        requests = [docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])]
        container = client.containers.create(
            image.id,
            command=["run", "--spec", f"{CONTAINER_RESULTS}/spec.toml",
                     "--results", CONTAINER_RESULTS, "--host", host.name, *run_args],
            network_mode="none",
            user=CONTAINER_USER,
            volumes={volume.name: {"bind": CONTAINER_RESULTS, "mode": "rw"}},
            # unbuffered: the container's lines reach `echo` as they are printed (a pipe would
            # hold them until the run ends: minutes under qemu)
            environment={IMAGE_DIGEST_VARIABLE: image.id, "PYTHONUNBUFFERED": "1"},
            device_requests=requests if host.gpus else None,
            labels={"org.lms-suite.run": host.name},
        )  # fmt: skip
        container.put_archive(CONTAINER_RESULTS, _tar(_seed_files(results_dir, host.name,
                                                                  spec_text)))  # fmt: skip
        container.start()
        for line in container.logs(stream=True, follow=True):
            for text in line.decode(errors="replace").splitlines():
                echo(f"[{host.name}] {text}")
        status = container.wait()
        stream, _ = container.get_archive(f"{CONTAINER_RESULTS}/.")
        with tempfile.TemporaryDirectory(prefix="lms-host-") as tmp:
            with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
                archive.extractall(tmp, filter="data")
            outcome.records = merge_results(Path(tmp), results_dir, host.name)
        if status.get("StatusCode") != 0:
            raise SuiteError(f"the run in the container exited with {status.get('StatusCode')}")
        outcome.ok = True
    except SuiteError as error:
        outcome.reason = str(error)
    except Exception as error:  # the SDK's errors: API, connection, SSH
        outcome.reason = f"{type(error).__name__}: {error}"
    finally:
        for thing in (container, volume):
            if thing is not None:
                with contextlib.suppress(Exception):
                    thing.remove(force=True)
        if client is not None:
            client.close()
    outcome.seconds = time.monotonic() - started
    return outcome


def outcome_line(outcome: HostOutcome) -> str:
    state = "ok" if outcome.ok else f"FAILED: {outcome.reason}"
    return f"host {outcome.host}: {state} ({outcome.records} new records, {outcome.seconds:.0f}s)"


def run_on_hosts(hosts: list[DockerHost], spec_path: Path, run_args: list[str],
                 results_dir: Path, echo=print) -> list[HostOutcome]:  # fmt: skip
    """Run on every host concurrently; the outcomes in the order of `hosts`."""
    spec_text = Path(spec_path).read_text()
    lock = threading.Lock()

    def locked_echo(line):
        with lock:
            echo(line)

    outcomes = [None] * len(hosts)

    def work(index, host):
        outcomes[index] = run_on_host(host, spec_text, run_args, Path(results_dir), locked_echo)

    threads = [threading.Thread(target=work, args=(i, h)) for i, h in enumerate(hosts)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return outcomes
