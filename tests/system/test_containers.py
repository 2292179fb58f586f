"""Containers with a real dockerd: local base images, the x86_64 image, runs on two hosts at once
(this daemon, and the same daemon reached for real over SSH with host-key checking), a host that
fails, the aarch64 image training under qemu beside x86_64, and the ppc64le base under qemu.
scripts/docker.sh (run by `inv test`) starts dockerd."""

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import docker
import pytest
from sshd import start_sshd

from suite.dispatch.docker import DockerHost
from suite.hosts.baseimage import base_tag, make_base_image
from suite.hosts.docker import run_on_hosts
from suite.hosts.images import build_image, suite_commit
from suite.records import TrialRecord, load, load_host, load_trials
from suite.specs import find_spec, load_spec

pytestmark = [pytest.mark.docker, pytest.mark.slow]
pytest_plugins = ["docker_fixtures"]  # client, image, ssh_host, tiny_spec
ROOT = Path(__file__).resolve().parents[2]


# Two hosts at once on two cores: the mechanism, not the mission (the default spec takes minutes);
# LMS off and on, so LMS runs inside the image too.
TWO_HOSTS = """
name = "two-hosts"
[defaults]
steps = 3
warmup_steps = 1
timeout = 600
[[study]]
name = "googlenet"
kind = "throughput"
lms_mode = "both"
workload = "googlenet"
resolution = 96
batch = 2
lms = { swapout_threshold = 1, swapin_ahead = 1, swapin_groupby = 0 }
memory_budget = "300MiB"
"""


VERSIONS = (
    "import json, platform, tensorflow as tf, keras; print(json.dumps({"
    "'tensorflow': tf.__version__, 'keras': keras.__version__, 'arch': platform.machine(),"
    "'python': platform.python_version(), 'cuda': tf.sysconfig.get_build_info().get('cuda_version')"
    "}))"
)


DESCRIBE = (
    "uname -m; python3 -c 'import json; from suite.hosts.description import describe_host; "
    "print(json.dumps(describe_host()))'"
)


def inv(*args) -> list[str]:
    """The command line of `./inv ARGS...`."""
    return [str(ROOT / "inv"), *map(str, args)]


def test_the_image_builds_from_the_local_base_which_is_then_cached(client, image):
    lines = []
    make_base_image(client, "x86_64", echo=lines.append)
    cached_id = client.images.get(base_tag("x86_64")).id[7:19]
    assert lines == [f"base {base_tag('x86_64')}: cached ({cached_id})"]
    # runs as non-root without network; the CA bundle of the build stays out of the image
    output = client.containers.run(
        image["id"],
        entrypoint=["sh", "-c", f'id -u; ls /tmp/build 2>&1; python -c "{VERSIONS}"'],
        network_mode="none",
        remove=True,
        environment={"TF_CPP_MIN_LOG_LEVEL": "3"},
    ).decode()
    assert output.splitlines()[0] == "1000" and "No such file" in output
    # the labels say what is inside: measured in the image, not copied from the pins
    inside = json.loads(output.splitlines()[-1])
    labels = {k.removeprefix("org.lms-suite."): v for k, v in image["labels"].items()}
    assert labels["tensorflow"] == inside["tensorflow"] == "2.21.0"
    assert labels["keras"] == inside["keras"]
    assert labels["python"].split()[0] == ".".join(inside["python"].split(".")[:2])
    assert labels["arch"] == inside["arch"] == "x86_64"
    assert labels["cuda"] == "none" and inside["cuda"] is None and labels["extras"] == "cpu"
    assert labels["base"] == base_tag("x86_64")
    assert labels["suite-commit"] == suite_commit() and labels["suite-commit"] != "unknown"
    assert image["labels"]["org.opencontainers.image.title"] == "lms-suite"


def test_a_spec_on_two_hosts_at_once_local_and_over_ssh(client, image, ssh_host, tmp_path):
    hosts = [
        DockerHost("local", "local", image["tag"]),
        DockerHost("remote", ssh_host.url, image["tag"]),
    ]
    spec_path = tmp_path / "two-hosts.toml"
    spec_path.write_text(TWO_HOSTS)
    results = tmp_path / "results"
    lines, seen = [], []

    def echo(line):  # the first trial's line comes as it starts, not when the run is over
        if line.startswith("[local] [trial 1/2]"):
            running = client.containers.list(filters={"label": "org.lms-suite.run=local"})
            command = ["sh", "-c", "cat /results/local.jsonl 2>/dev/null | wc -l"]
            seen.append(running[0].exec_run(command).output.strip() if running else b"exited")
        lines.append(line)

    outcomes = run_on_hosts(hosts, spec_path, [], results, echo)
    assert seen == [b"0"], "the container's lines came when its trials were done"
    assert [o.ok for o in outcomes] == [True, True], [o.reason for o in outcomes]
    expected = {t.hash for t in load_spec(str(spec_path)).trials}  # what a native run records
    for host in ("local", "remote"):
        records = load_trials(results, host)
        assert {r.spec_hash for r in records} == expected
        assert all(r.outcome == "ok" and r.host == host for r in records)
        assert all(r.image == image["id"] for r in records)
        assert [bool(r.params.lms) for r in records] == [False, True]
        assert records[1].metrics.lms_plan.swapped_bytes > 0
        description = load_host(results, records[0].host_ref)
        assert description.image_digest == image["id"] and description.raw["in_container"]
    assert any(line.startswith("[remote] [trial 1/2]") for line in lines)
    # a second run finds everything recorded (the records were seeded into the containers)
    again = run_on_hosts(hosts[:1], spec_path, [], results, lines.append)
    assert again[0].ok and again[0].records == 0


class ContainerWatch:
    """Inspects, from outside, every container the suite starts for host `name` while it runs:
    its configuration, and from inside it (docker exec) its user and network interfaces."""

    def __init__(self, client, name):
        self.client, self.label = client, f"org.lms-suite.run={name}"
        self.seen, self._stop = {}, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _watch(self):
        while not self._stop.is_set():
            for container in self.client.containers.list(filters={"label": self.label}):
                if container.id not in self.seen:
                    with contextlib.suppress(docker.errors.APIError):  # it may just have ended
                        self.seen[container.id] = self._inspect(container)
            time.sleep(0.2)

    @staticmethod
    def _inspect(container):
        uid = container.exec_run(["id", "-u"]).output.decode().strip()
        lines = container.exec_run(["cat", "/proc/net/dev"]).output.decode().splitlines()
        return {
            "network_mode": container.attrs["HostConfig"]["NetworkMode"],
            "user": container.attrs["Config"]["User"],
            "uid": uid,
            "interfaces": sorted(line.split(":")[0].strip() for line in lines[2:]),
        }


def test_inv_run_hosts_from_invoke_yaml_isolated_and_a_failing_host_loses_nothing(
    client, image, ssh_host, tiny_spec, tmp_path
):
    """`inv run --hosts` as a user types it: hosts from invoke.yaml (the shipped `local`, plus
    three broken ones from a runtime config file); the container of `local` runs as non-root
    without a network; a forced second run adds a new run of the same trial."""
    spec = tiny_spec
    stranger = start_sshd(tmp_path / "stranger", known=False)  # its key is not in known_hosts
    config = tmp_path / "hosts.yaml"
    config.write_text(
        "suite:\n  hosts:\n"
        "    closed: {url: 'ssh://root@127.0.0.1:1'}\n"
        f"    stranger: {{url: '{stranger.url}'}}\n"
        "    noimage: {url: local, image: 'lms-suite:does-not-exist'}\n"
    )
    command = inv("-f", config, "run", "--spec", spec, "--results", tmp_path / "r")
    env = {**os.environ, "HOME": str(ssh_host.home)}
    try:
        with ContainerWatch(client, "local") as watch:
            hosts = ["--hosts", "local,closed,stranger,noimage"]
            completed = subprocess.run(
                [*command, *hosts], capture_output=True, text=True, env=env, timeout=900
            )
    finally:
        stranger.stop()
    output = completed.stdout + completed.stderr
    assert completed.returncode == 1 and "error: 3 of 4 hosts failed" in output, output
    assert "host local: ok (1 new records" in output
    assert "host closed: FAILED: unreachable" in output
    assert "host stranger: FAILED:" in output and "known_hosts" in output
    assert "host noimage: FAILED: image lms-suite:does-not-exist is not on local" in output
    (seen,) = watch.seen.values()
    expected = {"network_mode": "none", "user": "1000:1000", "uid": "1000", "interfaces": ["lo"]}
    assert seen == expected, seen
    (first,) = load_trials(tmp_path / "r", "local")
    assert first.image == image["id"] and first.outcome == "ok"

    again = [*command, "--hosts", "local", "--force"]
    forced = subprocess.run(again, capture_output=True, text=True, env=env, timeout=900)
    assert forced.returncode == 0, forced.stdout + forced.stderr
    records = load_trials(tmp_path / "r", "local")
    assert len(records) == 2 and records[0] == first and records[1].run != first.run
    assert records[1].spec_hash == first.spec_hash


def test_the_ppc64le_base_is_a_ppc64le_system_under_emulation(client):
    tag = make_base_image(client, "ppc64le")
    assert client.images.get(tag).attrs["Architecture"] == "ppc64le"
    root = str(find_spec("smoke").parents[2])
    mount = ["-v", f"{root}:/suite:ro", "-e", "PYTHONPATH=/suite"]
    command = ["docker", "run", "--rm", "--network", "none", "--platform", "linux/ppc64le"]
    completed = subprocess.run(
        [*command, *mount, tag, "sh", "-c", DESCRIBE], capture_output=True, text=True, timeout=900
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    machine, description = completed.stdout.splitlines()[0], completed.stdout.splitlines()[-1]
    assert machine == "ppc64le"
    facts = json.loads(description)
    assert facts["architecture"] == "ppc64le" and facts["tensorflow_version"] is None


@pytest.fixture(scope="module")
def arm_image(client):
    """The aarch64 image (TensorFlow 2.21 from PyPI) from the local arm64 base, under qemu."""
    return build_image(client, "aarch64", "local", "cpu", echo=lambda line: None)


def test_an_aarch64_image_trains_beside_x86_64_and_the_report_flags_it(
    client, image, arm_image, tiny_spec, tmp_path
):
    """The shipped hosts `local` and `local-arm64` (invoke.yaml): one spec, one hash, trained
    in both images on this machine's daemon, the aarch64 one under qemu-user; its description
    and the report say it is emulated."""
    labels = {k.removeprefix("org.lms-suite."): v for k, v in arm_image["labels"].items()}
    assert labels["arch"] == "aarch64" and labels["tensorflow"] == "2.21.0"
    assert client.images.get(arm_image["tag"]).attrs["Architecture"] == "arm64"
    assert labels["base"] == base_tag("aarch64")
    spec = tiny_spec
    run = ["run", "--spec", spec, "--hosts", "local,local-arm64", "--results", tmp_path / "r"]
    report = ["report", "--results", tmp_path / "r", "--output", tmp_path / "report"]
    completed = subprocess.run(inv(*run, *report), capture_output=True, text=True, timeout=1800)
    output = completed.stdout + completed.stderr
    assert completed.returncode == 0, output[-3000:]
    (native,) = load_trials(tmp_path / "r", "local")
    (arm,) = load_trials(tmp_path / "r", "local-arm64")
    assert native.outcome == arm.outcome == "ok", arm.error
    assert native.spec_hash == arm.spec_hash
    assert (native.image, arm.image) == (image["id"], arm_image["id"])
    described = load_host(tmp_path / "r", arm.host_ref)
    assert described.architecture == "aarch64" and described.tensorflow_version == "2.21.0"
    assert described.emulation.startswith("qemu-user: aarch64 on an x86_64 kernel")
    assert described.cpu_kernels == "Eigen"  # TensorFlow enables oneDNN on some Arm CPUs only
    native_host = load_host(tmp_path / "r", native.host_ref)
    assert native_host.emulation is None and native_host.cpu_kernels == "oneDNN"
    report = (tmp_path / "report" / "report.md").read_text()
    assert "⚠ **local-arm64 is emulated**" in report and "local-arm64 ⚠ emulated" in report


def test_invoke_build_run_runs_the_spec_in_the_image_it_built(image, tiny_spec, tmp_path):
    """`invoke build run` does what it says: `run` after `build` in one invocation runs in the
    built image on the invoke.yaml hosts (here: the default, this machine's daemon). With
    --native too, both places share this machine: they run in rounds, one place at a time."""
    spec = tiny_spec
    spec.write_text(spec.read_text().replace("timeout = 300", "timeout = 300\nrepeats = 2"))
    completed = subprocess.run(
        [
            sys.executable,
            "-m",
            "invoke",
            "build",
            "--arch",
            "x86_64",
            *map(str, ["run", "--spec", spec, "--results", tmp_path / "r", "--native"]),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert f"in containers on local ({image['tag']})" in completed.stdout
    assert "round 2/2: this machine, local in turn" in completed.stdout
    records = [r for p in (tmp_path / "r").glob("*.jsonl") for r in load(p, TrialRecord)]
    records.sort(key=lambda r: r.started_at + str(r.image is not None))
    # the same trial, one hash, natively and in the image just built; repeats alternate places
    assert len({r.spec_hash for r in records}) == 1
    alternating = [(False, 0), (True, 0), (False, 1), (True, 1)]
    assert [(r.image is not None, r.repeat) for r in records] == alternating
    assert {r.image for r in records} == {None, image["id"]}
    assert len({r.run for r in records}) == 1  # the rounds make one run
