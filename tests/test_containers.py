"""Containers with a real dockerd: local base images, the x86_64 image, runs on two hosts at once
(this daemon, and the same daemon reached for real over SSH with host-key checking), a host that
fails, and the ppc64le base under qemu. scripts/docker.sh (run by `inv test`) starts dockerd."""

import json
import subprocess

import pytest
from sshd import start_sshd

from suite.baseimage import base_tag, make_base_image
from suite.hostrun import DockerHost, run_on_hosts
from suite.imagebuild import build_image
from suite.records import load_host, load_records, results_file
from suite.specs import find_spec, load_spec

pytestmark = [pytest.mark.docker, pytest.mark.slow]

TINY = """
name = "tiny"
[defaults]
steps = 2
warmup_steps = 1
timeout = 300
[[study]]
name = "g"
kind = "throughput"
workload = "googlenet"
resolution = 32
batch = 1
"""


@pytest.fixture(scope="module")
def client():
    import docker

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


def test_the_image_builds_from_the_local_base_which_is_then_cached(client, image):
    labels = image["labels"]
    assert labels["org.lms-suite.tensorflow"] == "2.21.0"
    assert labels["org.lms-suite.arch"] == "x86_64"
    assert labels["org.lms-suite.base"] == base_tag("x86_64")
    lines = []
    make_base_image(client, "x86_64", echo=lines.append)
    cached_id = client.images.get(base_tag("x86_64")).id[7:19]
    assert lines == [f"base {base_tag('x86_64')}: cached ({cached_id})"]
    # runs as non-root without network; the CA bundle of the build stays out of the image
    output = client.containers.run(
        image["id"], entrypoint=["sh", "-c", "id -u; ls /tmp/build 2>&1 || true"],
        network_mode="none", remove=True,
    ).decode()  # fmt: skip
    assert output.splitlines()[0] == "1000" and "No such file" in output


def test_smoke_spec_on_two_hosts_at_once_local_and_over_ssh(image, ssh_host, tmp_path):
    hosts = [
        DockerHost("local", "local", image["tag"]),
        DockerHost("remote", ssh_host.url, image["tag"]),
    ]
    lines = []
    outcomes = run_on_hosts(hosts, find_spec("smoke"), [], tmp_path, lines.append)
    assert [o.ok for o in outcomes] == [True, True], [o.reason for o in outcomes]
    expected = {t.hash for t in load_spec("smoke").trials}  # what a native run records
    for host in ("local", "remote"):
        records = load_records(results_file(tmp_path, host))
        assert {r["spec_hash"] for r in records} == expected
        assert all(r["outcome"] == "ok" and r["host"] == host for r in records)
        assert all(r["image"] == image["id"] for r in records)
        description = load_host(tmp_path, records[0]["host_ref"])
        assert description["image_digest"] == image["id"] and description["in_container"]
    assert any(line.startswith("[remote] [trial 1/4]") for line in lines)
    # a second run finds everything recorded (the records were seeded into the containers)
    again = run_on_hosts(hosts[:1], find_spec("smoke"), [], tmp_path, lines.append)
    assert again[0].ok and again[0].records == 0


def test_a_failing_host_is_reported_and_does_not_lose_the_others(image, ssh_host, tmp_path):
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    stranger = start_sshd(tmp_path / "stranger", known=False)  # its key is not in known_hosts
    try:
        hosts = [
            DockerHost("local", "local", image["tag"]),
            DockerHost("closed", "ssh://root@127.0.0.1:1", image["tag"]),
            DockerHost("stranger", stranger.url, image["tag"]),
            DockerHost("noimage", "local", "lms-suite:does-not-exist"),
        ]
        outcomes = run_on_hosts(hosts, spec, [], tmp_path / "r", lambda _: None)
    finally:
        stranger.stop()
    by_host = {o.host: o for o in outcomes}
    assert by_host["local"].ok and by_host["local"].records == 1
    assert not by_host["closed"].ok and "unreachable" in by_host["closed"].reason
    assert not by_host["stranger"].ok and "known_hosts" in by_host["stranger"].reason
    assert not by_host["noimage"].ok and "is not on" in by_host["noimage"].reason
    assert len(load_records(results_file(tmp_path / "r", "local"))) == 1


def test_the_ppc64le_base_is_a_ppc64le_system_under_emulation(client):
    tag = make_base_image(client, "ppc64le")
    assert client.images.get(tag).attrs["Architecture"] == "ppc64le"
    root = str(find_spec("smoke").parents[2])
    completed = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "--platform", "linux/ppc64le",
         "-v", f"{root}:/suite:ro", "-e", "PYTHONPATH=/suite", tag, "sh", "-c",
         "uname -m; python3 -c 'import json; from suite.hostinfo import describe_host; "
         "print(json.dumps(describe_host()))'"],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-2000:]
    machine, description = completed.stdout.splitlines()[0], completed.stdout.splitlines()[-1]
    assert machine == "ppc64le"
    facts = json.loads(description)
    assert facts["architecture"] == "ppc64le" and facts["tensorflow_version"] is None
