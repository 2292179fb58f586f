"""A Docker host's /results volume: seeded with the spec and the host's earlier records, copied
out into this checkout's results while its container runs (each record as it finishes, so a run
stopped at any moment keeps them), and swept by the next run when a killed run left it behind.

Copies are idempotent: records merge by key (trial: spec hash, repeat, run), and a record file's
last line is taken only once it ends with a newline (a copy may catch an append half written).
"""

import contextlib
import io
import shutil
import socket
import tarfile
import tempfile
import threading
import time
from pathlib import Path

from suite.records import (
    PredictionRecord,
    SearchRecord,
    TrialRecord,
    append,
    load,
    predictions_file,
    results_file,
    searches_file,
    shared_folders,
)

CONTAINER_RESULTS = "/results"
# where the directory this machine lends LMS (`inv run --host-disk`) is bind-mounted in a container
CONTAINER_DISK = "/lms-disk"
HOST_LABEL = "org.lms-suite.run"  # the host's name
RESULTS_LABEL = "org.lms-suite.results"  # which results directory the volume's records go to
POLL_SECONDS = 3.0  # how often a running container's record files are looked at


def run_labels(host: str, results_dir: Path) -> dict[str, str]:
    """Labels of a run's container and volume: the host, and the results directory on this
    machine, so that a later run sweeps only what an earlier run into the same results left."""
    return {
        HOST_LABEL: host,
        RESULTS_LABEL: f"{socket.gethostname()}:{Path(results_dir).resolve()}",
    }


def _record_files(results_dir: Path, host: str) -> tuple[Path, ...]:
    return (
        results_file(results_dir, host),
        searches_file(results_dir, host),
        predictions_file(results_dir, host),
    )


def tar_files(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.uid, info.gid, info.mode = len(data), 1000, 1000, 0o644
            info.mtime = int(time.time())
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def seed_files(results_dir: Path, host: str, spec_text: str) -> dict[str, bytes]:
    """The spec and this host's earlier records, for the container's /results."""
    files = {"spec.toml": spec_text.encode()}
    for path in _record_files(results_dir, host):
        if path.exists():
            files[str(path.relative_to(results_dir))] = path.read_bytes()
    return files


def merge_results(source: Path, results_dir: Path, host: str) -> int:
    """Merge a container's results into `results_dir`: new records appended, host descriptions
    and logs copied. Returns the number of new trial records."""
    added = 0
    kinds = (
        # a forced re-run (`inv run --force`, e.g. nightly) is a new run of the same trials
        (results_file, TrialRecord, lambda r: (r.spec_hash, r.repeat, r.run)),
        (searches_file, SearchRecord, lambda r: r.search_hash),
        (predictions_file, PredictionRecord, lambda r: r.search_hash),
    )
    for locate, kind, key in kinds:
        theirs = locate(source, host)
        if not theirs.exists():
            continue
        ours = locate(results_dir, host)
        known = {key(r) for r in load(ours, kind)}
        for record in load(theirs, kind):
            if key(record) not in known:
                append(ours, record)
                known.add(key(record))
                added += locate is results_file
    for folder in shared_folders(host):
        if (source / folder).is_dir():
            shutil.copytree(source / folder, results_dir / folder, dirs_exist_ok=True)
    return added


def _drop_unfinished_lines(source: Path, host: str) -> None:
    """Cut each record file after its last newline: an append caught half written by the copy
    is taken by the next copy, whole."""
    for path in _record_files(source, host):
        if path.exists():
            data = path.read_bytes()
            path.write_bytes(data[: data.rfind(b"\n") + 1])


def copy_out(container, results_dir: Path, host: str) -> int:
    """Copy the container's /results (running or stopped) and merge it into `results_dir`;
    the number of new trial records."""
    stream, _ = container.get_archive(f"{CONTAINER_RESULTS}/.")
    with tempfile.TemporaryDirectory(prefix="lms-host-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(b"".join(stream))) as archive:
            archive.extractall(tmp, filter="data")
        _drop_unfinished_lines(Path(tmp), host)
        return merge_results(Path(tmp), Path(results_dir), host)


def _path_size(container, path: str) -> int:
    """A file's size in the container, 0 if missing: the Engine's HEAD /containers/{id}/archive,
    which states a path without sending it (the SDK has no call for it)."""
    import docker

    api = container.client.api
    response = api.head(api._url("/containers/{0}/archive", container.id), params={"path": path})
    if response.status_code == 404:
        return 0
    api._raise_for_status(response)
    stat = docker.utils.decode_json_header(response.headers["X-Docker-Container-Path-Stat"])
    return stat["size"]


class RecordsWatch:
    """While a container runs, copies its records out as they appear: every few seconds it
    compares the sizes of the record files in /results and copies out when one grew. Its own
    errors (a container just gone, a dropped connection) wait for the next look or the final
    copy, which `run_on_host` makes after the container ended."""

    def __init__(self, container, results_dir: Path, host: str, seconds: float = POLL_SECONDS):
        self.container, self.host, self.seconds = container, host, seconds
        self.results_dir = Path(results_dir)
        self.records = 0
        self._paths = [
            f"{CONTAINER_RESULTS}/{p.relative_to(self.results_dir)}"
            for p in _record_files(self.results_dir, host)
        ]
        self._sizes = None
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"records-{host}", daemon=True)

    def _look(self):
        sizes = [_path_size(self.container, path) for path in self._paths]
        if self._sizes is not None and sizes != self._sizes:
            self.records += copy_out(self.container, self.results_dir, self.host)
        self._sizes = sizes  # taken before the copy: a record written meanwhile is seen next time

    def _watch(self):
        while not self._done.wait(self.seconds):
            with contextlib.suppress(Exception):
                self._look()

    def __enter__(self):
        with contextlib.suppress(Exception):
            self._look()  # the seeded sizes
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._done.set()
        self._thread.join()


def sweep_volumes(client, host: str, image_id: str, results_dir: Path, echo) -> int:
    """Volumes an earlier run of `host` into `results_dir` left (it was killed: SIGKILL, a power
    cut): their finished records are merged into `results_dir`, then they and their stopped
    containers are removed. A volume a running container uses (another run, or one still
    stopping) is left alone. Returns the number of records kept."""
    labels = [f"{k}={v}" for k, v in run_labels(host, results_dir).items()]
    kept = 0
    for volume in client.volumes.list(filters={"label": labels}):
        users = client.containers.list(all=True, filters={"volume": volume.name})
        if any(c.status in ("running", "restarting", "paused") for c in users):
            echo(f"[{host}] volume {volume.name} is in use by a running container: left alone")
            continue
        if users:
            reader = users[0]
        else:
            mount = {volume.name: {"bind": CONTAINER_RESULTS, "mode": "ro"}}
            labels = run_labels(host, results_dir)
            reader = client.containers.create(
                image_id, volumes=mount, network_mode="none", labels=labels
            )
        added = copy_out(reader, results_dir, host)
        for container in {*users, reader}:
            container.remove(force=True)
        volume.remove(force=True)
        kept += added
        echo(f"[{host}] swept volume {volume.name} an interrupted run left: {added} new records")
    return kept
