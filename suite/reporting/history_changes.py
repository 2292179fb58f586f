"""What changed on a host between two runs: the suite commit, the image, the TensorFlow version,
or the rest of the host description. The history marks each where it happened.

The measured copy bandwidths (`link`) are left out of the comparison: they are measured anew
with every description, so two captures of one unchanged host differ there (and in their hash);
the GPUs' topology is compared. A run whose host description is missing has nothing to compare:
no marker, and the page says so (suite.reporting.history)."""

from dataclasses import dataclass

from suite.records import HostDescription


@dataclass(frozen=True)
class Change:
    """One thing that changed on `host` at `run` (against the host's run before it)."""

    run: str
    started_at: str
    host: str
    what: str  # "suite commit", "image", "TensorFlow", "host description"
    before: str
    after: str

    @property
    def label(self) -> str:
        """ "TensorFlow 2.20.0 → 2.21.0", as the plot's legend and the page name it."""
        if not self.before:  # the rest of a description: what differs, named in `after`
            return f"{self.what}: {self.after}"
        return f"{self.what} {self.before} → {self.after}"


def _commit(d: HostDescription) -> str:
    commit = (d.suite.commit if d.suite else None) or "unknown"
    return commit[:10] + (" (modified)" if d.suite and d.suite.dirty else "")


def _image(d: HostDescription) -> str:
    digest = d.image_digest
    return "native" if digest is None else digest.removeprefix("sha256:")[:12]


def _text(value) -> str:
    return "unknown" if value is None else str(value)


# what the markers name, each read from a description
NAMED = {
    "suite commit": _commit,
    "image": _image,
    "TensorFlow": lambda d: _text(d.tensorflow_version),
}
# the rest of a description: label -> value (compared as a whole, named by label)
OTHER = {
    "architecture": lambda d: d.architecture,
    "emulation": lambda d: d.emulation,
    "CPU": lambda d: d.cpu,
    "memory": lambda d: d.memory_bytes,
    "GPUs": lambda d: d.gpus,
    "CPU kernels": lambda d: d.cpu_kernels,
    "driver": lambda d: d.driver_version,
    "CUDA": lambda d: d.cuda_version,
    "cuDNN": lambda d: d.cudnn_version,
    "Keras": lambda d: d.keras_version,
    "Python": lambda d: d.python_version,
}


def describe_change(before: HostDescription, after: HostDescription) -> list[tuple[str, str, str]]:
    """(what, before, after) for each named field that differs, then one for the rest."""
    found = [
        (what, read(before), read(after))
        for what, read in NAMED.items()
        if read(before) != read(after)
    ]
    other = [label for label, read in OTHER.items() if read(before) != read(after)]
    if other:
        found.append(("host description", "", ", ".join(other) + " changed"))
    return found


def changes_between(runs) -> list[Change]:
    """Every change on every host between consecutive runs (oldest first) that described it."""
    last: dict[str, HostDescription] = {}
    changes = []
    for run in runs:
        for host, description in run.descriptions.items():
            if description is None:
                continue
            if host in last:
                for what, before, after in describe_change(last[host], description):
                    changes.append(Change(run.key, run.started_at, host, what, before, after))
            last[host] = description
    return changes


def missing_fields(description: HostDescription) -> list[str]:
    """What a description (an older capture) does not say, among what the markers compare."""
    lacking = []
    if description.tensorflow_version is None:
        lacking.append("the TensorFlow version")
    if description.suite is None or description.suite.commit is None:
        lacking.append("the suite commit")
    return lacking
