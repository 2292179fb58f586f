"""Fixtures of the container tests (`pytest_plugins = ["docker_fixtures"]`): this machine's Docker
engine, the suite's x86_64 image built from the local base with this checkout's suite, and a
real sshd on loopback whose HOME reaches that engine over SSH, and a tiny spec."""

from pathlib import Path

import docker
import pytest
from sshd import start_sshd
from tiny_specs import TINY

from suite.hosts.images import build_image


@pytest.fixture(scope="module")
def client():
    client = docker.from_env(timeout=900)
    client.ping()
    return client


@pytest.fixture(scope="module")
def image(client):
    """The x86_64 image from the local base (cached by docker between runs)."""
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
