"""What a resolved spec is: its trials, switch sweeps and limit searches, and the canonical hash
that says two hosts ran the same trial. Built by `suite.specs.loader`; read by running and
reporting. No validation here: everything in these objects has been checked."""

import copy
import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from suite.lms_seam import link_text


def trial_hash(params: dict) -> str:
    """Canonical hash of resolved parameters: sorted-key JSON, SHA-256, 16 hex digits.

    A TFRecord path is host-specific, so only its format and final component enter the hash.
    """
    canonical = copy.deepcopy(params)
    data = canonical.get("data", {})
    if "path" in data:
        data["name"] = Path(data.pop("path")).name
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class TrialParams:
    """What a trial is: every parameter that decides what it measures, and nothing else. Its
    canonical dict (`to_dict`) is what a record stores, what a trial process receives and what the
    spec hash is taken of."""

    workload: str
    resolution: int | None  # None in a search's or sweep's template: the value is chosen later
    batch: int | None
    precision: str
    classes: int
    steps: int
    warmup_steps: int
    data: dict  # {"kind": "synthetic"} or {"kind": "tfrecord", "format": ..., "path": ...}
    memory_budget_bytes: int | None  # the emulated device's memory; None: the device's own
    seed: int
    lms: dict | None = None  # the resolved `lms` table (suite.lms_seam), None: LMS off
    gpus: int = 1  # devices per node, one worker process each (data-parallel replicas)
    nodes: int = 1

    def to_dict(self) -> dict:
        """The canonical form. `lms` only when on, `gpus` and `nodes` only when not 1, so that
        trials without them keep the hashes they had before these fields existed."""
        values = dataclasses.asdict(self)
        if values["lms"] is None:
            del values["lms"]
        for key in ("gpus", "nodes"):
            if values[key] == 1:
                del values[key]
        return values

    @property
    def replicas(self) -> int:
        return self.gpus * self.nodes

    @property
    def global_batch(self) -> int | None:
        """The samples one step trains on over all replicas (`batch` is per replica)."""
        return None if self.batch is None else self.batch * self.replicas

    @classmethod
    def from_dict(cls, values: dict) -> "TrialParams":
        """From the canonical form (a trial process's input, a record's `params`); ValueError
        names what is missing or unknown."""
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(values, dict):
            raise ValueError(f"trial parameters must be a JSON object, not {type(values).__name__}")
        missing = sorted(names - {"lms", "gpus", "nodes"} - set(values))
        unknown = sorted(set(values) - names)
        if missing or unknown:
            raise ValueError(
                f"trial parameters: missing {missing or 'none'}, unknown {unknown or 'none'}"
            )
        return cls(**values)

    @property
    def hash(self) -> str:
        return trial_hash(self.to_dict())

    def replace(self, **changes) -> "TrialParams":
        return dataclasses.replace(self, **changes)

    def in_mode(self, mode: str, lms_settings: dict) -> "TrialParams":
        """These parameters (LMS off) as they are for `mode`: "off", or "on" with `lms_settings`."""
        return self.replace(lms=lms_settings if mode == "on" else None)

    @property
    def info(self):
        """The workload's registry entry (suite.workloads.WorkloadInfo)."""
        from suite.workloads import get_workload

        return get_workload(self.workload)

    def describe(self) -> str:
        text = f"{self.workload} {self.resolution}px batch {self.batch} {self.precision}"
        return text + replicas_text(self)


def replicas_text(params: "TrialParams") -> str:
    """ "" for one replica, else " x 4 GPUs (global batch 60)" (" on 2 nodes" when more)."""
    if params.replicas == 1:
        return ""
    nodes = f" on {params.nodes} nodes" if params.nodes > 1 else ""
    return f" x {params.gpus} GPUs{nodes} (global batch {params.global_batch})"


def lms_text(settings: dict | None) -> str:
    """ "off", "on (auto-tuned)" or "on (swapout_threshold 1, swapin_ahead 1, ...)"."""
    if not settings:
        return "off"
    names = ("swapout_threshold", "swapin_ahead", "swapin_groupby", "sync_mode", "ordering")
    fixed = [f"{n} {settings[n]}" for n in names if settings.get(n, -1) != -1 and n in settings]
    link = settings.get("link")
    over = f", {link_text(link)} emulated link" if link else ""
    if all(settings.get(n, -1) == -1 for n in names[:3]):
        return f"on (auto-tuned{over})"
    return f"on ({', '.join(fixed)}{over})"


@dataclass(frozen=True)
class Trial:
    """One runnable trial: resolved parameters (hashed) plus how to run it (not hashed)."""

    spec: str
    study: str
    params: TrialParams
    repeats: int
    timeout_s: float

    @property
    def hash(self) -> str:
        return self.params.hash

    def describe(self) -> str:
        return f"{self.params.describe()} ({self.study})"


@dataclass(frozen=True)
class Search:
    """A limit search: the largest `searched` value in start..stop (by step) that trains."""

    spec: str
    study: str
    kind: str
    params: TrialParams  # LMS off, the searched dimension None
    start: int
    stop: int
    step: int
    modes: tuple = ("off", "on")
    lms: dict = field(default_factory=dict)  # the LMS settings of mode "on"
    timeout_s: float = 3600.0
    # how the boundary is confirmed (suite.running.boundary); not hashed: a recorded search is
    # not redone when they change
    boundary_repeats: int = 2  # more processes at each boundary size when it is near the budget
    boundary_spread: float = 0.10  # a peak's spread between processes, relative to the peak

    @property
    def searched(self) -> str:
        return "resolution" if self.kind == "max-resolution" else "batch"

    @property
    def candidates(self) -> list[int]:
        return list(range(self.start, self.stop + 1, self.step))

    def trial(self, value: int, mode: str) -> Trial:
        params = self.params.replace(**{self.searched: value}).in_mode(mode, self.lms)
        return Trial(self.spec, self.study, params, 1, self.timeout_s)

    @property
    def limit_key(self) -> str:
        """The same for the LMS-off and LMS-on searches of one study: what reports pair."""
        return trial_hash(
            {
                "kind": self.kind,
                "params": self.params.to_dict(),
                "range": [self.start, self.stop, self.step],
            }
        )

    def hash(self, mode: str) -> str:
        lms = self.lms if mode == "on" else None
        return trial_hash({"limit": self.limit_key, "mode": mode, "lms": lms})

    def describe(self, mode: str) -> str:
        p = self.params
        fixed = f"batch {p.batch}" if self.searched == "resolution" else f"{p.resolution}px"
        return f"{self.kind} {p.workload} {fixed} {p.precision}, LMS {mode}"


@dataclass(frozen=True)
class SwitchSweep:
    """A sweep that runs LMS off while the model fits and on from the first size it does not."""

    spec: str
    study: str
    params: TrialParams  # LMS off, resolution None
    resolutions: tuple
    lms: dict
    repeats: int
    timeout_s: float

    def trial(self, resolution: int, mode: str) -> Trial:
        params = self.params.replace(resolution=resolution).in_mode(mode, self.lms)
        return Trial(self.spec, self.study, params, self.repeats, self.timeout_s)


@dataclass
class Spec:
    name: str
    description: str
    source: str
    trials: list[Trial] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    switch_sweeps: list[SwitchSweep] = field(default_factory=list)

    def study_lines(self) -> list[str]:
        """One line per study: what it runs, and LMS (off, on with which settings, off and on,
        or switched on where the model no longer fits)."""
        sizes, modes = {}, {}
        for trial in self.trials:
            p = trial.params
            sizes.setdefault(trial.study, (p, []))[1].append(p.resolution)
            modes.setdefault(trial.study, set()).add(lms_text(p.lms))
        what = {}
        for study, (p, resolutions) in sizes.items():
            low, high = min(resolutions), max(resolutions)
            side = f"{low}px" if low == high else f"{low}-{high}px ({len(set(resolutions))} sizes)"
            what[study] = f"{p.workload} {side} batch {p.batch} {p.precision}{replicas_text(p)}"
        for sweep in self.switch_sweeps:
            p, r = sweep.params, sweep.resolutions
            what[sweep.study] = f"{p.workload} {r[0]}-{r[-1]}px batch {p.batch} {p.precision}"
            modes[sweep.study] = {f"off, then {lms_text(sweep.lms)} where it no longer fits"}
        for search in self.searches:
            p = search.params
            fixed = f"batch {p.batch}" if search.searched == "resolution" else f"{p.resolution}px"
            what[search.study] = (
                f"largest {search.searched} of {p.workload} {fixed} "
                f"{p.precision} in {search.start}..{search.stop}"
            )
            modes[search.study] = {
                "off" if m == "off" else lms_text(search.lms) for m in search.modes
            }
        return [
            f"{study}: {what[study]} — LMS "
            + " and ".join(sorted(modes[study], key=lambda m: m != "off"))
            for study in what
        ]

    def plannable_trials(self) -> list[Trial]:
        """Every trial known before running: static ones, and switch sweeps' LMS-on trials."""
        swept = [s.trial(r, "on") for s in self.switch_sweeps for r in s.resolutions]
        return self.trials + swept
