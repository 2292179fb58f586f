"""What `inv test` runs, in order: the setup of what some tests need (a Docker engine, a two-node
Slurm, Chromium), ruff, the tests, the tests that depend on the CPU kernels once more with the
kernels this CPU does not default to, the GPU tests in a session of their own on a GPU host, and
the compat tests on TensorFlow 2.14.1. The Docker and Slurm tests, which mostly wait (on
containers, on Slurm's jobs and nodes), run in a session of their own beside all of that: it
starts before the main session and its log and exit code are collected at the end.

Why here: which sessions there are and what each selects is the suite's test plan (the kernels
are suite.environment's ONEDNN_VARIABLE; the GPU session is tests/conftest.py's LMS_TEST_GPU),
while tasks.py only runs the commands, echoed, as invoke runs them."""

import json
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from suite.environment import ONEDNN_VARIABLE

# what `inv test` runs in the background, each holding its lock while it runs (paths relative to
# the repository's root; test-artifacts/ is ignored by git and kept by CI), its output beside it
PREBUILD_LOCK = Path("test-artifacts/prebuild-images.lock")  # the container tests' images
COMPAT_VENV_LOCK = Path("test-artifacts/venv-tf2.14.lock")  # the compat session's environment
BACKGROUND_SECONDS = 3600  # at the latest then a lock goes; what waits for it does the work itself
# the parts whose tests mostly wait rather than compute, in their own session beside the others
# (held by this lock, its log and exit code beside it); at the latest after BESIDE_SECONDS it
# is stopped and fails: a hang, since the session is usually done in well under an hour
BESIDE = ("docker", "slurm")
BESIDE_LOCK = Path("test-artifacts/docker-slurm-tests.lock")
BESIDE_SECONDS = 2 * BACKGROUND_SECONDS
# every session's report: the skipped and failed tests' reasons, and its 30 slowest tests (where
# CI's time goes, in its log)
REPORT = "-ra --durations=30"


@dataclass(frozen=True)
class Command:
    """A shell command of `inv test`, run from the repository's root."""

    line: str
    # the exit codes it passes with, for a session that may select nothing (pytest's 5); None:
    # any failure stops `inv test` at once
    passes: tuple[int, ...] | None = None
    failure: str = ""  # what `inv test` says when it does not pass


def onednn_enabled(python: str, root: Path) -> bool:
    """Whether this CPU's TensorFlow defaults to oneDNN's kernels (asked in a child process:
    TensorFlow stays out of this one)."""
    probe = "import lms; print(int(lms.cpu_kernels() == 'onednn'))"
    done = subprocess.run(
        [python, "-c", probe], capture_output=True, text=True, check=True, cwd=root
    )
    lines = done.stdout.strip().splitlines()
    return bool(lines) and lines[-1] == "1"


def has_gpu() -> bool:
    """Whether this host has an NVIDIA GPU (nvidia-smi lists one): then the GPU tests run too."""
    if shutil.which("nvidia-smi") is None:
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True).returncode == 0


def _holding(lock: Path, background: str) -> str:
    """A shell line that takes `lock` (flock, exclusive, on fd 9) and then starts `background` (a
    command ending in &), which inherits fd 9 and so holds the lock until it ends: the line
    returns at once, and whatever takes the lock after it waits for `background` to end."""
    return f"mkdir -p {lock.parent} && exec 9>{lock} && flock 9 && {{ {background} }}"


def in_background(command: str, lock: Path) -> str:
    """A shell line that takes `lock` and starts `command` in the background (`_holding`),
    niced, for at most BACKGROUND_SECONDS, its output in the lock's .log."""
    log = lock.with_suffix(".log")
    return _holding(lock, f"nohup timeout {BACKGROUND_SECONDS} nice -n 10 {command} >{log} 2>&1 &")


def beside(session: str, lock: Path) -> str:
    """A shell line that takes `lock` and starts the test session `session` in the background
    (`_holding`), its output in the lock's .log and its exit code in the lock's .status when it
    ends (`collect` reads both); not niced (its tests time what they wait for), at most
    BESIDE_SECONDS."""
    log, status = lock.with_suffix(".log"), lock.with_suffix(".status")
    script = f"rm -f {status}; timeout {BESIDE_SECONDS} {session}; echo $? >{status}"
    return _holding(lock, f"nohup sh -c {shlex.quote(script)} >{log} 2>&1 &")


def collect(lock: Path) -> str:
    """A shell line that waits for `beside`'s session to end (its lock), prints its log and exits
    with its exit code (1 if it wrote none: it was killed)."""
    log, status = lock.with_suffix(".log"), lock.with_suffix(".status")
    return f'flock {lock} cat {log}; exit "$(cat {status} 2>/dev/null || echo 1)"'


def commands(
    python: str, root: Path, compat: bool, lint: bool, setups: dict, k: str | None = None
) -> Iterator[Command]:
    """`inv test`'s commands in order (`python`: this environment's interpreter). `setups`:
    per part some tests need ("docker", "slurm", "chromium"; scripts/PART.sh installs and
    starts it), whether it is set up and its tests run, or its tests deselected; `k`: only the
    tests that match this pytest -k expression. Made one at a time: the probes for the kernels
    and the GPU run when their sessions are next."""
    selector = f" -k {json.dumps(k)}" if k else ""
    skipped = [f"not {part}" for part, wanted in setups.items() if not wanted]
    waiting = [part for part in BESIDE if setups.get(part)]
    for part in (part for part, wanted in setups.items() if wanted):
        yield Command(f"bash scripts/{part}.sh")
    venv = root / ".venv-tf2.14"
    if compat:
        # TensorFlow 2.14.1's environment, made while the sessions before its own run: minutes of
        # downloads and unpacking from a clean clone; its session takes the lock before it starts
        yield Command(in_background(f"bash scripts/venv.sh {venv} tf214,dev", COMPAT_VENV_LOCK))
    if setups.get("docker") and not k:
        # the container tests' images (tests/support/_prebuild_images.py): from cold Docker
        # images that is minutes of downloads and one emulated core, which the main session's
        # first tests (lms's, mostly one core of Python) leave free; the container tests (in
        # their session beside it) wait for the lock and find them cached. Not for -k: it may
        # select none.
        prebuild = f"{python} tests/support/_prebuild_images.py"
        yield Command(in_background(prebuild, PREBUILD_LOCK))
    if lint:
        yield Command(f"{python} -m ruff check .")
        yield Command(f"{python} -m ruff format --check .")
    if waiting:
        # the Docker and Slurm tests, from here on beside every session below: their containers
        # and jobs mostly wait, and leave the cores to the others (the container tests wait for
        # the prebuild's lock, as in any session); collected at the end
        side = " or ".join(waiting)
        side = " and ".join([f"({side})", *skipped]) if skipped else side
        session = f"{python} -m pytest {REPORT} -m {json.dumps(side)}{selector}"
        yield Command(beside(session, BESIDE_LOCK))
    main = [*skipped, *(f"not {part}" for part in waiting)]
    marker = f" -m {json.dumps(' and '.join(main))}" if main else ""
    yield Command(f"{python} -m pytest {REPORT}{marker}{selector}")
    # the CPU kernels this CPU does not default to (oneDNN's without AVX-512, Eigen's with it):
    # the tests that depend on them, once more, so CI covers both on any CPU
    other = "0" if onednn_enabled(python, root) else "1"
    kernels = f" -m {json.dumps(' and '.join(['kernels', *skipped]))}"
    yield Command(
        f"{ONEDNN_VARIABLE}={other} {python} -m pytest {REPORT}{kernels}{selector}",
        (0, 5),  # 5: -k left none of them
        f"the tests with {ONEDNN_VARIABLE}={other} failed",
    )
    # on a GPU host: the gpu-marked tests in a session of their own, with the GPU visible (the
    # session above hides it: tests/conftest.py)
    if has_gpu():
        gpu = f"LMS_TEST_GPU=1 {python} -m pytest {REPORT} -m gpu{selector}"
        yield Command(gpu, (0, 5), "the GPU tests failed")
    if compat:
        # after the background setup (or again, where it failed: venv.sh then says why)
        yield Command(f"flock {COMPAT_VENV_LOCK} bash scripts/venv.sh {venv} tf214,dev")
        yield Command(f"{venv}/bin/python -m pytest {REPORT} -m compat{selector}")
    if waiting:
        yield Command(
            collect(BESIDE_LOCK),
            (0, 5) if k else (0,),  # 5: -k left none of them
            f"the {' and '.join(waiting)} tests failed (their session's log is printed above)",
        )
