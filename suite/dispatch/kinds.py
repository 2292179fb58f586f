"""The one place a host's kind is decided: which class an entry of invoke.yaml `suite.hosts` (or
an `ssh://` URL on the command line) is, and which hosts `inv run` runs a spec on.

An entry's `scheduler` names its kind: none, a Docker engine (`url`: local, unix://, tcp:// or
ssh://user@host: SSH is a way to reach an engine, suite/dispatch/docker.py); `slurm`, a Slurm
cluster. This machine outside containers is `NativeHost`, chosen by `--native` or by naming no
host. A new kind is a new module beside these and one line in `SCHEDULERS`.
"""

from suite.dispatch.base import Host
from suite.dispatch.docker import DockerHost
from suite.dispatch.native import NativeHost
from suite.dispatch.slurm import SlurmHost
from suite.errors import SuiteError

KINDS: dict[str, type[Host]] = {k.kind: k for k in (NativeHost, DockerHost, SlurmHost)}
SCHEDULERS: dict[str | None, type[Host]] = {None: DockerHost, "slurm": SlurmHost}


def kind_of(name: str, settings: dict | None) -> type[Host]:
    """The class of invoke.yaml's `suite.hosts.NAME`, from its `scheduler`."""
    scheduler = (settings or {}).get("scheduler")
    if scheduler not in SCHEDULERS:
        raise SuiteError(
            f"invoke.yaml suite.hosts.{name}: scheduler {scheduler!r} is not a host kind; the "
            "kinds: docker (no scheduler; url: local, unix://, tcp:// or ssh://user@host), "
            "slurm (scheduler: slurm), native (this machine: --native, or no --hosts)"
        )
    return SCHEDULERS[scheduler]


def configured_host(name: str, configured: dict, default_image: str) -> Host:
    """The host `inv run --hosts` names: an entry of invoke.yaml suite.hosts, or an ssh:// URL
    (a Docker engine reached over SSH)."""
    if name not in configured and not name.startswith("ssh://"):
        known = ", ".join(configured) or "none"
        raise SuiteError(
            f"host {name!r} is not in invoke.yaml suite.hosts (known: {known}) and is not an "
            "ssh:// URL"
        )
    settings = configured.get(name) or {}
    return kind_of(name, settings).from_config(name, settings, default_image)


def hosts_for_images(configured: dict, default_image: str, built: list[str]) -> list[Host]:
    """`inv build run`: the Docker hosts of invoke.yaml whose image was just built (a host's image
    is its own `image`, else suite.image)."""
    hosts = [configured_host(name, configured, default_image) for name in configured]
    chosen = [h for h in hosts if isinstance(h, DockerHost) and h.image in built]
    if not chosen:
        raise SuiteError(
            f"no host in invoke.yaml suite.hosts runs the image(s) just built "
            f"({', '.join(built)}); set suite.hosts.<name>.image"
        )
    return chosen


def choose_hosts(
    names: str | None,
    configured: dict | None = None,
    default_image: str = "",
    built: list[str] | None = None,
    native: bool = False,
    label: str | None = None,
) -> list[Host]:
    """Where `inv run` runs: the hosts of `--hosts a,b,...`; without it, those running the images
    `inv build` built earlier in the same invocation; this machine (under `label`, `--host`)
    with `--native` or when neither names a host. This machine comes first."""
    configured = configured or {}
    if names is not None:
        listed = [n.strip() for n in names.split(",") if n.strip()]
        if not listed:
            raise SuiteError(f"--hosts {names!r} names no host")
        hosts = [configured_host(n, configured, default_image) for n in dict.fromkeys(listed)]
    elif built:
        hosts = hosts_for_images(configured, default_image, list(built))
    else:
        hosts = []
    return ([NativeHost(label)] if native or not hosts else []) + hosts
