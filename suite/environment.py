"""The environment of the suite's child processes (trials, predictions, the host description):
the same everywhere, so that what a trial measures does not depend on who started it."""

import os
from pathlib import Path

# What every trial process gets, whatever the parent's environment: allocator statistics on the
# CPU (the emulated device) and TensorFlow's C++ logging quiet enough to read the trial log.
TRIAL_ENVIRONMENT = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


def child_environment(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the suite's child processes (trials, predictions, host description):
    this one's, TRIAL_ENVIRONMENT, `extra_env`, and the checkout first on PYTHONPATH."""
    env = {**os.environ, **TRIAL_ENVIRONMENT, **(extra_env or {})}
    repo_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
    return env
