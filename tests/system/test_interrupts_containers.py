"""Stopping `inv run --hosts` with real signals: a real `inv run` process (this machine's daemon,
or the same daemon over a real SSH connection), a real container training three tiny trials.
Records reach results/ while the container runs; SIGINT and SIGTERM stop the container, keep
what finished and remove the volume; after SIGKILL the container stops by itself and the next
run sweeps the volume; a rerun runs only what did not finish."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from suite.hosts.volumes import run_labels, sweep_volumes
from suite.records import TrialRecord, load_trials

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest_plugins = ["docker_fixtures"]  # client, image, ssh_host, tiny_spec
ROOT = Path(__file__).resolve().parents[2]
REPEATS = 3


@pytest.fixture
def three(tiny_spec) -> Path:
    """Three trial processes of one tiny trial: after the first record, one is in flight."""
    text = tiny_spec.read_text()
    tiny_spec.write_text(text.replace("timeout = 300", f"timeout = 300\nrepeats = {REPEATS}"))
    return tiny_spec


def wait_until(condition, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while not (found := condition()):
        assert time.monotonic() < deadline, f"not within {seconds:.0f} s: {what}"
        time.sleep(0.5)
    return found


class Run:
    """`inv run --spec SPEC --hosts HOST` in a process of its own, in `tmp_path`."""

    def __init__(self, tmp_path: Path, url: str, spec: Path, home: Path | None = None):
        self.results = tmp_path / "results"
        self.host = "127.0.0.1" if url.startswith("ssh://") else url
        self.spec = spec
        self.tmp = tmp_path / "tmp"  # the run's temporary files: none may be left
        self.tmp.mkdir()
        self.env = {**os.environ, "TMPDIR": str(self.tmp), **({"HOME": str(home)} if home else {})}
        arguments = ["run", "--spec", self.spec, "--hosts", url, "--results", self.results]
        self.command = [sys.executable, "-m", "invoke", *map(str, arguments)]
        self.labels = [f"{k}={v}" for k, v in run_labels(self.host, self.results).items()]

    def start(self, output) -> subprocess.Popen:
        where = {"cwd": ROOT, "env": self.env, "start_new_session": True}
        return subprocess.Popen(self.command, stdout=output, stderr=subprocess.STDOUT, **where)

    def complete(self) -> subprocess.CompletedProcess:
        return subprocess.run(
            self.command, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=900
        )

    def records(self) -> list[TrialRecord]:
        return load_trials(self.results, self.host)

    def containers(self, client, running=True):
        return client.containers.list(all=not running, filters={"label": self.labels})

    def volumes(self, client):
        return client.volumes.list(filters={"label": self.labels})

    def interrupt(self, client, tmp_path: Path, signum) -> tuple[int, str, int]:
        """Start the run, wait for its first record in results/ while its container still
        runs, send `signum`; (exit code, output, records then)."""
        output = tmp_path / "output.txt"
        with output.open("w") as sink:
            process = self.start(sink)
        try:
            wait_until(self.records, 600, "a first record in results/")
            # copied out as it finished: the container still runs the other trials
            assert self.containers(client), "the records came only when the container ended"
            process.send_signal(signum)
            process.wait(timeout=90)
        finally:
            if process.poll() is None:
                process.kill()
        return process.returncode, output.read_text(), len(self.records())


def assert_a_rerun_runs_only_what_is_missing(run: Run, client, kept: list[dict]) -> str:
    completed = run.complete()
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-3000:]
    assert f"host {run.host}: ok ({REPEATS - len(kept)} new records" in output, output[-3000:]
    records = run.records()
    assert records[: len(kept)] == kept  # the kept ones, as they were
    assert sorted(r.repeat for r in records) == list(range(REPEATS))
    assert all(r.outcome == "ok" for r in records)
    assert len({r.run for r in records}) == 1  # resumed: one run for inv baseline and regress
    assert not run.containers(client, running=False) and not run.volumes(client)
    return output


def assert_killed_by_its_tether(run: Run, client):
    """The container ended because its run was killed (137: SIGKILL), not because its trials
    were done (0)."""
    (container,) = run.containers(client, running=False)
    assert container.attrs["State"]["ExitCode"] == 128 + signal.SIGKILL, container.attrs["State"]


def test_sigint_stops_the_container_keeps_what_finished_and_a_rerun_runs_the_rest(
    client, image, three, tmp_path
):
    run = Run(tmp_path, "local", three)
    code, output, kept = run.interrupt(client, tmp_path, signal.SIGINT)
    assert code == 130, output[-3000:]
    assert output.splitlines()[-1] == (
        f"stopped: interrupted by SIGINT; stopped the containers on local; {kept} new records "
        f"from containers kept in {run.results}"
    )
    assert 1 <= kept < REPEATS  # the trial in flight was not waited for
    assert not run.containers(client, running=False), "a container of the run is left"
    assert not run.volumes(client), "the run's volume is left"
    assert not list(run.tmp.iterdir()), "temporary files are left"
    assert_a_rerun_runs_only_what_is_missing(run, client, run.records())


def test_sigterm_over_ssh_stops_the_remote_container_and_keeps_what_finished(
    client, image, three, ssh_host, tmp_path
):
    run = Run(tmp_path, ssh_host.url, three, home=ssh_host.home)
    code, output, kept = run.interrupt(client, tmp_path, signal.SIGTERM)
    assert code == 143, output[-3000:]
    assert output.splitlines()[-1] == (
        f"stopped: interrupted by SIGTERM; stopped the containers on 127.0.0.1; {kept} new "
        f"records from containers kept in {run.results}"
    )
    assert 1 <= kept < REPEATS
    assert not run.containers(client, running=False) and not run.volumes(client)
    assert not list(run.tmp.iterdir())


def test_after_sigkill_the_container_stops_by_itself_and_the_rerun_sweeps_its_volume(
    client, image, three, tmp_path
):
    run = Run(tmp_path, "local", three)
    code, _, kept = run.interrupt(client, tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    # nothing of the run is left to stop it: its closed connection does (the tether)
    wait_until(lambda: not run.containers(client), 90, "the container stopped by itself")
    assert_killed_by_its_tether(run, client)
    (volume,) = run.volumes(client)  # left for the next run, with what finished in it
    assert 1 <= kept < REPEATS
    output = assert_a_rerun_runs_only_what_is_missing(run, client, run.records())
    assert f"[local] swept volume {volume.name} an interrupted run left: " in output


def test_after_sigkill_over_ssh_the_remote_container_stops_by_itself_and_is_swept(
    client, image, three, ssh_host, tmp_path
):
    run = Run(tmp_path, ssh_host.url, three, home=ssh_host.home)
    code, _, kept = run.interrupt(client, tmp_path, signal.SIGKILL)
    assert code == -signal.SIGKILL
    wait_until(lambda: not run.containers(client), 90, "the container stopped by itself")
    assert_killed_by_its_tether(run, client)
    (volume,) = run.volumes(client)
    # the sweep a next run makes first, over SSH: the volume's records merged, then it goes
    remote = docker.DockerClient(base_url=ssh_host.url, timeout=120)
    lines = []
    try:
        added = sweep_volumes(remote, run.host, image["id"], run.results, lines.append)
    finally:
        remote.close()
    assert lines == [
        f"[127.0.0.1] swept volume {volume.name} an interrupted run left: {added} new records"
    ]
    records = run.records()
    assert len(records) == kept + added < REPEATS
    assert len({r.repeat for r in records}) == len(records)  # nothing twice
    assert not run.containers(client, running=False) and not run.volumes(client)
