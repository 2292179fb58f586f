"""Which class a host is, decided in suite/dispatch/kinds.py only: every host invoke.yaml ships or
shows (its commented examples too) resolves to its kind's class, an unknown kind is one error
listing the kinds, and `inv run`'s choices (--hosts, after `inv build`, --native) pick the hosts
they say."""

from pathlib import Path

import pytest
from invoke.config import yaml

from suite.dispatch.base import Host
from suite.dispatch.docker import DockerHost
from suite.dispatch.kinds import KINDS, choose_hosts, configured_host, hosts_for_images, kind_of
from suite.dispatch.native import NativeHost
from suite.dispatch.slurm import SlurmHost
from suite.errors import SuiteError

ROOT = Path(__file__).resolve().parents[3]
IMAGE = "lms-suite:x86_64-cpu"


def shipped_hosts() -> dict:
    """invoke.yaml's suite.hosts with its commented examples uncommented."""
    lines = (ROOT / "invoke.yaml").read_text().splitlines()
    start = lines.index("  hosts:                    # Docker hosts for `inv run --hosts NAME,...`")
    block = [
        line[:4] + line[6:] if line.startswith("    # ") else line for line in lines[start + 1 :]
    ]
    return yaml.safe_load("\n".join(["hosts:", *block]))["hosts"]


def test_every_host_invoke_yaml_ships_or_shows_resolves_to_its_kinds_class():
    configured = shipped_hosts()
    expected = {
        "local": DockerHost,
        "local-arm64": DockerHost,
        "power9": DockerHost,
        "cluster": SlurmHost,
    }
    assert {name: type(configured_host(name, configured, IMAGE)) for name in configured} == (
        expected
    )
    power9 = configured_host("power9", configured, IMAGE)
    assert (power9.url, power9.gpus, power9.on_this_machine) == (
        "ssh://bench@power9.example.com",
        True,
        False,
    )
    cluster = configured_host("cluster", configured, IMAGE)
    assert (cluster.partition, cluster.max_jobs) == ("debug", 8)
    assert all(issubclass(kind, Host) for kind in KINDS.values())
    assert set(KINDS) == {"native", "docker", "slurm"}


def test_ssh_is_a_docker_engine_reached_over_ssh():
    """An ssh:// URL (on the command line, or an entry's url) is a DockerHost: the same engine
    API over another transport; loopback shares this machine's cores, so it takes turns."""
    (remote,) = choose_hosts("ssh://bench@192.0.2.7:2222", {}, IMAGE)
    assert type(remote) is DockerHost and remote.name == "192.0.2.7"
    assert remote.in_thread and not remote.on_this_machine
    (loopback,) = choose_hosts("ssh://me@127.0.0.1:2222", {}, IMAGE)
    assert loopback.on_this_machine and not loopback.in_thread


def test_an_unknown_kind_is_one_error_listing_the_kinds():
    with pytest.raises(SuiteError) as error:
        kind_of("hpc", {"scheduler": "pbs", "partition": "debug"})
    message = str(error.value)
    assert "\n" not in message
    assert message.startswith("invoke.yaml suite.hosts.hpc: scheduler 'pbs' is not a host kind")
    for kind in KINDS:
        assert f"{kind} (" in message
    with pytest.raises(SuiteError, match="scheduler 'pbs' is not a host kind"):
        choose_hosts("hpc", {"hpc": {"scheduler": "pbs"}}, IMAGE)


def test_a_kinds_unknown_settings_are_refused_naming_the_ones_it_takes():
    with pytest.raises(
        SuiteError,
        match=r"suite.hosts.box: unknown settings \['partition'\]; "
        "a Docker host takes url, image, gpus",
    ):
        configured_host("box", {"box": {"url": "local", "partition": "debug"}}, IMAGE)
    with pytest.raises(SuiteError, match=r"suite.hosts.c: unknown key\(s\) \['image'\]"):
        configured_host("c", {"c": {"scheduler": "slurm", "image": "x"}}, IMAGE)


def test_inv_run_chooses_named_hosts_built_images_or_this_machine():
    configured = shipped_hosts()
    assert choose_hosts(None, configured, IMAGE) == [NativeHost(None)]
    named = choose_hosts("cluster,local,local", configured, IMAGE, native=True, label="me")
    assert [(type(h), h.name) for h in named] == [
        (NativeHost, "me"),
        (SlurmHost, "cluster"),
        (DockerHost, "local"),
    ]
    with pytest.raises(SuiteError, match="host 'nowhere' is not in invoke.yaml suite.hosts"):
        choose_hosts("nowhere", configured, IMAGE)
    with pytest.raises(SuiteError, match="--hosts ',' names no host"):
        choose_hosts(",", configured, IMAGE)
    # after `inv build`: the Docker hosts running what was built (a cluster runs no image)
    built = choose_hosts(None, configured, IMAGE, built=["lms-suite:aarch64-cpu"])
    assert [h.name for h in built] == ["local-arm64"]
    # --hosts wins over what was built
    assert [h.name for h in choose_hosts("local", configured, IMAGE, built=["x"])] == ["local"]


def test_a_build_no_host_can_run_is_one_clear_error():
    configured = {
        "local": {"url": "local"},
        "power9": {"url": "ssh://b@p9", "image": "x:ppc"},
        "cluster": {"scheduler": "slurm"},
    }
    chosen = hosts_for_images(configured, IMAGE, ["x:ppc"])
    assert [h.name for h in chosen] == ["power9"]
    with pytest.raises(SuiteError, match="no host in invoke.yaml suite.hosts runs the image"):
        hosts_for_images(configured, IMAGE, ["lms-suite:ppc64le-none"])
