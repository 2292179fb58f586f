"""Specs: the TOML files beside this module (the suite's own studies), how they are loaded and
validated (`loader`), what a resolved spec is (`model`), and `inv specs`'s listing (`listing`)."""

from suite.specs.listing import describe_specs
from suite.specs.loader import (
    available_specs,
    find_spec,
    load_spec,
    parse_spec,
)
from suite.specs.model import Search, Spec, SwitchSweep, Trial, TrialParams, trial_hash

__all__ = [
    "Search",
    "Spec",
    "SwitchSweep",
    "Trial",
    "TrialParams",
    "available_specs",
    "describe_specs",
    "find_spec",
    "load_spec",
    "parse_spec",
    "trial_hash",
]
