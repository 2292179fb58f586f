"""A tiny spec (GoogLeNet at 32px, batch 1, three timed steps) for the tests that run real trial
processes, and the repository's root for those that start `inv`."""

from pathlib import Path

from suite.specs import parse_spec

ROOT = Path(__file__).resolve().parents[2]

TINY = """
name = "tiny"
[defaults]
steps = 3
warmup_steps = 1
timeout = 300
{defaults}
[[study]]
name = "g"
kind = "sweep"
workload = "googlenet"
batch = 1
resolutions = {resolutions}
"""


def tiny_spec(resolutions="[32]", defaults=""):
    return parse_spec(TINY.format(resolutions=resolutions, defaults=defaults), "tiny.toml")
