"""The environment of the suite's child processes (trials, predictions, the host description):
the same everywhere, so that what a trial measures does not depend on who started it."""

import os
import platform
from pathlib import Path

# What every trial process gets, whatever the parent's environment: allocator statistics on the
# CPU (the emulated device) and TensorFlow's C++ logging quiet enough to read the trial log.
TRIAL_ENVIRONMENT = {"TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}


# TensorFlow picks its CPU kernels by CPU: oneDNN's where the x86_64 CPU has AVX-512, Eigen's
# elsewhere, and the two hold different temporaries (a convolution's peak differs by up to 2x),
# so two x86_64 hosts would report different limits for a reason that is neither their memory
# nor their link. Trials on x86_64 run oneDNN's wherever they run; aarch64 keeps TensorFlow's
# choice (oneDNN's on Neoverse, Eigen's elsewhere, qemu's included). A value the user sets wins;
# the host description and each LMS report say which set trained.
ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"


def kernel_environment(machine: str | None = None) -> dict[str, str]:
    """The CPU-kernel setting trials get on `machine` (default: this one) unless the user set it."""
    if ONEDNN_VARIABLE in os.environ:
        return {}
    machine = (machine or platform.machine()).lower()
    return {ONEDNN_VARIABLE: "1"} if machine in ("x86_64", "amd64") else {}


def child_environment(extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the suite's child processes (trials, predictions, host description):
    this one's, TRIAL_ENVIRONMENT, the CPU kernels (`kernel_environment`), `extra_env`, and the
    checkout first on PYTHONPATH."""
    env = {**os.environ, **TRIAL_ENVIRONMENT, **kernel_environment(), **(extra_env or {})}
    repo_root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
    return env
