"""Kill and revive one node of the two-node Slurm that scripts/slurm.sh runs on this machine, as
a machine that dies would: its slurmd, the slurmstepd of each job step on it, and the tasks those
started (the processes whose environment says SLURMD_NODENAME=<node>)."""

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # gone, or not ours to read
        return b""


def node_processes(node: str) -> set[int]:
    """The pids of `node`'s slurmd, its step daemons and their tasks."""
    pids = set()
    pidfile = Path(f"/run/slurmd-{node}.pid")
    if pidfile.exists() and pidfile.read_text().strip().isdigit():
        pids.add(int(pidfile.read_text()))
    marker = f"SLURMD_NODENAME={node}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit() or marker not in _read(proc / "environ").split(b"\0"):
            continue
        pids.add(int(proc.name))
        stat = _read(proc / "stat").decode()
        parent = int(stat.rsplit(")", 1)[1].split()[1]) if stat else 0
        if _read(Path(f"/proc/{parent}/cmdline")).startswith(b"slurmstepd"):
            pids.add(parent)
    return pids


def kill_node(node: str) -> set[int]:
    """SIGKILL everything of `node` (its slurmd first, so it cannot restart a step)."""
    pids = node_processes(node)
    for pid in sorted(pids):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    return pids


def node_state(node: str) -> str:
    listed = subprocess.run(
        ["sinfo", "-h", "-N", "-n", node, "-o", "%T"], capture_output=True, text=True
    )
    return listed.stdout.strip()


def revive_node(node: str, timeout_s: float = 120) -> None:
    """Start `node`'s slurmd again and wait until Slurm takes it back (ReturnToService=2)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "slurm.sh"), "start-node", node], check=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if node_state(node).rstrip("*") in ("idle", "mixed", "allocated"):
            return
        time.sleep(1)
    raise AssertionError(f"{node} did not come back: {node_state(node)}")
