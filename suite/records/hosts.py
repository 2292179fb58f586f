"""Host descriptions (`<results>/hosts/<ref>.json`), stored once under the hash of their content:
records refer to them by `host_ref`, identical hosts share one. The stored table is never
rewritten (its hash is its name), so it has no schema version: `HostDescription.from_dict`
reads every form the suite wrote, a field an older capture lacked read as unknown (None)."""

import dataclasses
import hashlib
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path

from suite.records.fields import INTEGER, NUMBERS, DamagedRecord, Table, read_fields
from suite.records.files import write_atomic

log = logging.getLogger("suite.records")


@dataclass(frozen=True)
class Cpu:
    model: str | None
    sockets: int | None
    cores: int | None
    threads: int | None


@dataclass(frozen=True)
class Gpu:
    model: str
    memory_bytes: int | None = None
    link: dict | None = None  # NVML topology: pcie_generation, pcie_width, nvlink_to_cpu


@dataclass(frozen=True)
class SuiteVersion:
    version: str | None = None
    commit: str | None = None
    dirty: bool | None = None


@dataclass(frozen=True)
class GpuCheck:
    """The newest `inv gpucheck` on the host when it was described (suite/running/gpucheck.py):
    how many of its checks passed, failed and did not run (GPU-only checks without a GPU)."""

    checked_at: str
    mode: str = field(metadata={"choices": ("gpu", "two-device")})
    passed: int
    failed: int
    not_run: int
    of: int
    tensorflow_version: str | None = None
    version: int = 1


# the copy sizes the hosts table shows a bandwidth at: 1 MiB, 64 MiB, 1 GiB
SHOWN_SIZES = (2**20, 2**26, 2**30)


def _link(t: Table, key: str, null: bool, default) -> dict | None:
    """The measured copy bandwidths (suite.hosts.link), checked for what the report reads: a
    number at each shown size, for memcpy and for each GPU each way."""
    link = t.table(key, null=True, default=None)
    if link is None:
        return None
    sizes = link("sizes_bytes", NUMBERS)
    if not set(SHOWN_SIZES) <= set(sizes):
        raise link.damaged("sizes_bytes", f"lacks one of the sizes {SHOWN_SIZES}")
    one_per_size = f"a list of {len(sizes)} numbers, one per size"
    rates = (lambda v: isinstance(v, list) and len(v) == len(sizes) and NUMBERS[0](v), one_per_size)
    link("memcpy_gbps", rates)
    for gpu in link.tables("gpus"):
        gpu("index", INTEGER)
        gpu("host_to_device_gbps", rates)
        gpu("device_to_host_gbps", rates)
    return link.values


@dataclass(frozen=True)
class HostDescription:
    """What a host is, as the hosts table shows it; `raw` is the stored table (its hash)."""

    architecture: str
    cpu: Cpu
    memory_bytes: int
    gpus: tuple[Gpu, ...] | None = None  # None: unknown (no NVML); (): none
    emulation: str | None = None  # qemu-user...; None: native
    cpu_kernels: str | None = None
    link: dict | None = field(default=None, metadata={"read": _link})
    driver_version: str | None = None
    cuda_version: str | None = None
    cudnn_version: str | None = None
    tensorflow_version: str | None = None
    keras_version: str | None = None
    python_version: str | None = None
    image_digest: str | None = None
    suite: SuiteVersion | None = None
    gpu_check: GpuCheck | None = None  # None: no `inv gpucheck` ran on the host before
    raw: dict | None = field(default=None, compare=False, repr=False)

    @classmethod
    def from_dict(cls, values: dict, where: str) -> "HostDescription":
        t = Table(values, where)
        return dataclasses.replace(read_fields(cls, t), raw=values)


def host_ref(description: dict) -> str:
    """Content hash of a description: records refer to it, identical hosts share it."""
    text = json.dumps(description, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def store_host(results_dir: Path, description: dict) -> str:
    """Write a host description (as captured, suite.hosts.description) once under its content
    hash; return the hash. Refused if it lacks what the report shows."""
    HostDescription.from_dict(description, "host description")
    ref = host_ref(description)
    path = Path(results_dir) / "hosts" / f"{ref}.json"
    if not path.exists():
        write_atomic(path, json.dumps(description, indent=1, sort_keys=True))
    return ref


def load_host(results_dir: Path, ref: str) -> HostDescription | None:
    """The description stored under `ref`; None (with a warning saying what to run) when there
    is none or it cannot be shown: missing, not JSON, edited since (its hash) or lacking a field."""
    path = Path(results_dir) / "hosts" / f"{ref}.json"
    if not path.exists():
        return None
    again = "re-run a trial on that host to describe it again"
    try:
        description = json.loads(path.read_text())
        if host_ref(description) != ref:
            problem = f"its content does not match its hash {ref} (edited or corrupted)"
            log.warning(
                "%s: skipping a host description: %s; restore it, or delete it and %s",
                path,
                problem,
                again,
            )
            return None
        return HostDescription.from_dict(description, str(path))
    except json.JSONDecodeError as error:
        problem = f"not valid JSON ({error.msg})"
    except DamagedRecord as error:
        problem = error.problem
    log.warning("%s: skipping a host description: %s; %s", path, problem, again)
    return None
