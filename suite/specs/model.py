"""What a resolved spec is: its trials, switch sweeps and limit searches, and the canonical hash
that says two hosts ran the same trial. Built by `suite.specs.loader`; read by running and
reporting. No validation here: everything in these objects has been checked."""

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path


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
class Trial:
    """One runnable trial: resolved parameters (hashed) plus how to run it (not hashed)."""

    spec: str
    study: str
    params: dict
    repeats: int
    timeout_s: float

    @property
    def hash(self) -> str:
        return trial_hash(self.params)

    def describe(self) -> str:
        p = self.params
        return (
            f"{p['workload']} {p['resolution']}px batch {p['batch']} {p['precision']} "
            f"({self.study})"
        )


def _with_lms(params: dict, mode: str, lms_settings: dict) -> dict:
    """`params` (LMS off) as they are for `mode`: "off", or "on" with `lms_settings`."""
    return {**params, "lms": lms_settings} if mode == "on" else dict(params)


@dataclass(frozen=True)
class Search:
    """A limit search: the largest `searched` value in start..stop (by step) that trains."""

    spec: str
    study: str
    kind: str
    params: dict  # resolved like a trial's (LMS off), the searched dimension None
    start: int
    stop: int
    step: int
    modes: tuple = ("off", "on")
    lms: dict = field(default_factory=dict)  # the LMS settings of mode "on"
    timeout_s: float = 3600.0

    @property
    def searched(self) -> str:
        return "resolution" if self.kind == "max-resolution" else "batch"

    @property
    def candidates(self) -> list[int]:
        return list(range(self.start, self.stop + 1, self.step))

    def trial(self, value: int, mode: str) -> Trial:
        params = _with_lms({**self.params, self.searched: value}, mode, self.lms)
        return Trial(self.spec, self.study, params, 1, self.timeout_s)

    @property
    def limit_key(self) -> str:
        """The same for the LMS-off and LMS-on searches of one study: what reports pair."""
        return trial_hash(
            {"kind": self.kind, "params": self.params, "range": [self.start, self.stop, self.step]}
        )

    def hash(self, mode: str) -> str:
        lms = self.lms if mode == "on" else None
        return trial_hash({"limit": self.limit_key, "mode": mode, "lms": lms})

    def describe(self, mode: str) -> str:
        p = self.params
        fixed = f"batch {p['batch']}" if self.searched == "resolution" else f"{p['resolution']}px"
        return f"{self.kind} {p['workload']} {fixed} {p['precision']}, LMS {mode}"


@dataclass(frozen=True)
class SwitchSweep:
    """A sweep that runs LMS off while the model fits and on from the first size it does not."""

    spec: str
    study: str
    params: dict  # resolved, LMS off, resolution None
    resolutions: tuple
    lms: dict
    repeats: int
    timeout_s: float

    def trial(self, resolution: int, mode: str) -> Trial:
        params = _with_lms({**self.params, "resolution": resolution}, mode, self.lms)
        return Trial(self.spec, self.study, params, self.repeats, self.timeout_s)


@dataclass
class Spec:
    name: str
    description: str
    source: str
    trials: list[Trial] = field(default_factory=list)
    searches: list[Search] = field(default_factory=list)
    switch_sweeps: list[SwitchSweep] = field(default_factory=list)

    def plannable_trials(self) -> list[Trial]:
        """Every trial known before running: static ones, and switch sweeps' LMS-on trials."""
        swept = [s.trial(r, "on") for s in self.switch_sweeps for r in s.resolutions]
        return self.trials + swept
