"""suite/hosts/docker.py without an engine: what a host's container is made with. (Containers
run for real in tests/system/test_containers.py.)"""

from types import SimpleNamespace

from suite.hosts.docker import _create_container
from suite.hosts.volumes import CONTAINER_DISK, CONTAINER_RESULTS


class _Engine:
    """Takes the container's options as the docker SDK's `containers.create` would."""

    def __init__(self):
        self.containers, self.options = self, None

    def create(self, image, **options):
        self.options = options
        return image


def test_a_disk_lent_to_lms_is_bound_into_the_container_and_handed_to_its_run(tmp_path):
    host = SimpleNamespace(name="box", gpus=False)
    image = SimpleNamespace(id="sha256:1", attrs={"Config": {"Entrypoint": ["inv"]}})
    volume = SimpleNamespace(name="lms-results-box")
    made = []
    for disk in (None, tmp_path):
        engine = _Engine()
        _create_container(engine, host, image, volume, ["--force"], {}, disk)
        made.append(engine.options)
    plain, lent = made
    results = {"lms-results-box": {"bind": CONTAINER_RESULTS, "mode": "rw"}}
    assert plain["volumes"] == results and "--host-disk" not in " ".join(plain["command"])
    assert lent["volumes"] == {**results, str(tmp_path): {"bind": CONTAINER_DISK, "mode": "rw"}}
    assert lent["command"][-2:] == ["--force", f"--host-disk={CONTAINER_DISK}"]
