"""A trial process whose run is gone ends itself, and takes its scratch directory with it.

A trial process runs in its own session (suite/running/trial.py: a time-out kills its whole
process group), so neither a Ctrl-C nor the run's death reaches it. When `inv run` is stopped by
SIGINT or SIGTERM it kills the trial itself; SIGKILL cannot be caught, and the trial would train
on as an orphan until its time-out (hours for a seed spec), loading the machine under the next
run's measurements, its `trial-*` scratch directory left behind.

Why a watchdog thread that compares `os.getppid()` with the parent that started the process,
and not `prctl(PR_SET_PDEATHSIG)`: the parent-death signal fires when the *thread* that forked the
child ends, not its process, and a run may start trials from worker threads; a signal cannot
clean up (SIGKILL) or is handled only by the main thread between bytecodes (any other signal),
which sits inside a TensorFlow op for a whole step; and it is Linux-only. The thread runs while
the main thread is inside TensorFlow (which releases the GIL), notices within `POLL_S`, kills the
process's own children (a launcher's replica workers), removes the scratch directory, and exits.
"""

import argparse
import contextlib
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import psutil

POLL_S = 0.5  # how often the parent is checked: a trial outlives its run by about this much
ORPHANED_EXIT_CODE = 125  # nobody reads it (the parent is gone); it marks the log


def _end(parent: int, scratch: Path | None) -> None:
    print(
        f"trial process {os.getpid()}: the run that started it (pid {parent}) is gone; "
        f"ending it{f' and removing {scratch}' if scratch else ''}",
        file=sys.stderr,
        flush=True,
    )
    children = psutil.Process().children(recursive=True)
    for child in children:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
    psutil.wait_procs(children, timeout=10)  # none may write into the scratch after it is gone
    if scratch is not None:
        shutil.rmtree(scratch, ignore_errors=True)
    os._exit(ORPHANED_EXIT_CODE)  # now: the main thread may be inside a TensorFlow op


def exit_with_parent(parent: int, scratch: Path | None = None) -> threading.Thread:
    """End this process (children first, then `scratch` removed) as soon as its parent is no
    longer `parent`: at once if it already is not (the run died before this was armed),
    otherwise from a daemon thread checking every `POLL_S` seconds."""
    if os.getppid() != parent:
        _end(parent, scratch)

    def watch():
        while os.getppid() == parent:  # re-parented: the process that started it is gone
            time.sleep(POLL_S)
        _end(parent, scratch)

    thread = threading.Thread(target=watch, name="orphan-guard", daemon=True)
    thread.start()
    return thread


def child_arguments(argv: list[str], prog: str, inputs: str, outputs: str) -> tuple[str, str]:
    """A child process's two paths (`inputs`, then `outputs`) and `--parent PID`; with it, the
    guard is armed at once (before the minutes TensorFlow may take), its scratch the inputs'
    directory. An argument, not an environment variable: a child's own children (replica
    workers, Slurm tasks) must not inherit it."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument(inputs)
    parser.add_argument(outputs)
    parser.add_argument("--parent", type=int, help="pid of the run that started this process")
    args = parser.parse_args(argv)
    first, second = getattr(args, inputs), getattr(args, outputs)
    if args.parent is not None:
        exit_with_parent(args.parent, Path(first).parent)
    return first, second
