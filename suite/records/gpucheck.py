"""Where `inv gpucheck` keeps what it found (suite/running/gpucheck.py runs the checks):
`<results>/gpucheck/<host>.json`, the whole run; and this machine's newest summary, which every
host description captured from then on carries (`HostDescription.gpu_check`), in
$XDG_STATE_HOME/lms-suite/gpucheck-<hostname>.json (~/.local/state by default): per machine name,
so a home directory shared by a cluster's nodes holds one per node."""

import json
import os
import socket
from pathlib import Path

from suite.records.files import check_host_name

SCHEMA_VERSION = 1  # of <results>/gpucheck/<host>.json and of the state file's summary


def record_file(results_dir: Path, host: str) -> Path:
    return Path(results_dir) / "gpucheck" / f"{check_host_name(host)}.json"


def state_file(hostname: str | None = None) -> Path:
    """This machine's newest check summary (module docstring)."""
    base = os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state"
    return Path(base) / "lms-suite" / f"gpucheck-{hostname or socket.gethostname()}.json"


def host_check_summary() -> dict | None:
    """The summary of this machine's newest `inv gpucheck`, for its host description; None when
    none ran here (or its file cannot be read: a description never fails for it)."""
    try:
        summary = json.loads(state_file().read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(summary, dict) or summary.get("version") != SCHEMA_VERSION:
        return None
    return summary
