"""Stored records as the suite writes them in schema 2, for the tests of suite.records and
suite.running: `trial_values` (a trial record's table, changes applied) and `search_values`."""

from suite.records import SCHEMA_VERSION
from suite.specs.model import TrialParams

PARAMS = TrialParams(
    workload="googlenet",
    resolution=64,
    batch=2,
    precision="fp32",
    classes=10,
    steps=3,
    warmup_steps=1,
    data={"kind": "synthetic"},
    memory_budget_bytes=None,
    seed=0,
)
RATE = {"mean": 1.0, "stderr": 0.1, "jitter": 0.05, "total": 1.0}


def trial_values(**changes) -> dict:
    values = {
        "schema": SCHEMA_VERSION,
        "spec": {"name": "t", "study": "a", "source": "t.toml"},
        "spec_hash": PARAMS.hash,
        "params": PARAMS.to_dict(),
        "repeat": 0,
        "host": "h1",
        "host_ref": "ffff",
        "outcome": "ok",
        "metrics": {"images_per_sec": RATE, "pixels_per_sec": RATE, "peak_memory_bytes": 2**20},
        "error": None,
        "device": "CPU:0",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:10+00:00",
        "wall_s": 10.0,
        "log": "logs/h1/x.log",
        "run": "run1",
        "image": None,
    }
    values.update(changes)
    return values


def search_values(**changes) -> dict:
    processes = [
        {
            "repeat": 0,
            "outcome": "ok",
            "peak_memory_bytes": 90,
            "margin_bytes": 10,
            "peak_ratio": 0.9,
        }
    ]
    values = {
        "schema": SCHEMA_VERSION,
        "kind": "max-batch",
        "search_hash": "abc",
        "limit_key": "k",
        "mode": "off",
        "spec": {"name": "t", "study": "s", "source": "t.toml"},
        "params": PARAMS.replace(batch=None).to_dict(),
        "lms": None,
        "searched": "batch",
        "range": [1, 8, 1],
        "largest_ok": 4,
        "smallest_failed": 5,
        "failed_outcome": "out_of_memory",
        "stop_reached": False,
        "trials": [
            {
                "value": 4,
                "spec_hash": "a",
                "repeat": 0,
                "outcome": "ok",
                "reused": False,
                "peak_memory_bytes": 90,
                "images_per_sec": 2.0,
            }
        ],
        "trials_run": 1,
        "boundary": {
            "limit": {"value": 4, "spec_hash": "a", "processes": processes},
            "failed": None,
            "budget_bytes": 100,
            "spread": 0.1,
            "repeats": 2,
            "near": True,
            "verdict": "uncertain",
        },
        "prediction": {"largest_fit": 4, "nothing_fits": False, "seconds": 1.0, "error": None},
        "host": "h1",
        "host_ref": "ffff",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:10+00:00",
    }
    values.update(changes)
    return values
