"""Fixtures of the container tests (`pytest_plugins = ["docker_fixtures"]`): this machine's Docker
engine, the suite's x86_64 image built from the local base with this checkout's suite, and a
real sshd on loopback whose HOME reaches that engine over SSH, and a tiny spec."""

import fcntl
from pathlib import Path

import docker
import pytest
from sshd import start_sshd
from tiny_specs import TINY

from suite.hosts.images import build_image
from suite.selftest import PREBUILD_LOCK

ROOT = Path(__file__).resolve().parents[2]


def wait_for_the_prebuild() -> None:
    """Wait while `inv test` builds the images in the background (suite/selftest.py holds the
    lock until its build ends); without one, at once. What it built is then cached."""
    lock = ROOT / PREBUILD_LOCK
    if lock.exists():
        with lock.open() as held:
            fcntl.flock(held, fcntl.LOCK_SH)


@pytest.fixture(scope="session")
def client():
    wait_for_the_prebuild()
    client = docker.from_env(timeout=900)
    client.ping()
    return client


@pytest.fixture(scope="session")
def image(client):
    """The x86_64 image from the local base (cached by docker between runs), built once for the
    session's container tests (each build of a cached image still sends the checkout and
    replays its steps: seconds)."""
    lines = []
    facts = build_image(client, "x86_64", "local", "cpu", echo=lines.append)
    assert any(line.startswith("    Step ") for line in lines)  # the streamed build log
    return facts


@pytest.fixture
def ssh_host(tmp_path, monkeypatch):
    server = start_sshd(tmp_path / "ssh")
    monkeypatch.setenv("HOME", str(server.home))  # ~/.ssh: the client's key and known_hosts
    yield server
    server.stop()


@pytest.fixture
def tiny_spec(tmp_path) -> Path:
    """A spec of one tiny trial (seconds in a container), as a file."""
    path = tmp_path / "tiny.toml"
    path.write_text(TINY)
    return path
