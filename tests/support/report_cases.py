"""Hand-made trial and search records with known numbers, in the form the suite stores them: the
tests of the report, the regression gate and the tasks build their results directories from
these (`write_record`), or read them as the report does (`trial`)."""

from pathlib import Path

from suite.records import (
    SCHEMA_VERSION,
    SearchRecord,
    TrialRecord,
    append_search,
    append_trial,
)

HOST = {
    "architecture": "x86_64",
    "cpu": {"model": "Test CPU", "sockets": 1, "cores": 2, "threads": 4},
    "memory_bytes": 2**34,
    "gpus": [],
    "driver_version": None,
    "cuda_version": None,
    "cudnn_version": None,
    "tensorflow_version": "2.21.0",
    "keras_version": "3.15.1",
    "python_version": "3.11.7",
    "image_digest": None,
    "suite": {"commit": "abcdef1234567890", "dirty": False},
    "link": {
        "sizes_bytes": [2**20, 2**23, 2**26, 2**28, 2**30],
        "memcpy_gbps": [40.0, 30.0, 12.0, 11.0, 10.0],
        "gpus": [],
    },
}


def record(host, ref, spec_hash, mean, stderr, resolution=64, outcome="ok", repeat=0):
    metrics = None
    if outcome == "ok":
        metrics = {
            "images_per_sec": {"mean": mean, "stderr": stderr, "jitter": 0.0, "total": mean},
            "pixels_per_sec": {
                "mean": mean * resolution**2,
                "stderr": stderr * resolution**2,
                "jitter": 0.0,
                "total": 0.0,
            },
            "peak_memory_bytes": 300 * 2**20,
        }
    return {
        "schema": SCHEMA_VERSION,
        "spec": {"name": "s", "study": "a", "source": "s.toml"},
        "spec_hash": spec_hash,
        "params": {
            "workload": "googlenet",
            "resolution": resolution,
            "batch": 2,
            "precision": "fp32",
            "classes": 1001,
            "steps": 5,
            "warmup_steps": 1,
            "data": {"kind": "synthetic"},
            "memory_budget_bytes": None,
            "seed": 0,
        },
        "repeat": repeat,
        "host": host,
        "host_ref": ref,
        "outcome": outcome,
        "metrics": metrics,
        "error": None if outcome == "ok" else "boom",
        "device": "CPU:0",
        "started_at": "2026-11-01T00:00:00+00:00",
        "finished_at": "2026-11-01T00:01:00+00:00",
        "wall_s": 60.0,
    }


LMS_EVERYTHING = {
    "swapout_threshold": 1,
    "swapin_ahead": 1,
    "swapin_groupby": 0,
    "sync_mode": 0,
    "serialization": [],
    "serialization_by_size": 0.0,
    "device_memory": None,
    "safety_ratio": 0.8,
}


def search_record(host, ref, kind, mode, largest, smallest):
    searched = "resolution" if kind == "max-resolution" else "batch"
    params = record(host, ref, "x", 1.0, 0.0)["params"]
    params[searched] = None
    params["memory_budget_bytes"] = 300 * 2**20
    return {
        "schema": SCHEMA_VERSION,
        "kind": kind,
        "search_hash": f"{kind}-{mode}-{host}",
        "limit_key": kind,
        "mode": mode,
        "spec": {"name": "s", "study": kind, "source": "s"},
        "params": params,
        "lms": LMS_EVERYTHING if mode == "on" else None,
        "searched": searched,
        "range": [32, 1024, 32],
        "largest_ok": largest,
        "smallest_failed": smallest,
        "failed_outcome": "out_of_memory",
        "stop_reached": False,
        "trials": [],
        "trials_run": 0,
        "boundary": None,
        "prediction": {"largest_fit": None, "nothing_fits": False, "seconds": None, "error": None},
        "host": host,
        "host_ref": ref,
        "started_at": "2026-11-01T00:00:00+00:00",
        "finished_at": "2026-11-01T00:10:00+00:00",
    }


MIB = 2**20


def lms_report(variable_bytes, input_bytes, op, op_bytes, budget=300 * MIB):
    """An LMS report as `lms.api.build_report` writes it into a trial's metrics (no timeline)."""
    return {
        "budget_bytes": budget,
        "planned_budget_bytes": budget,
        "fits": True,
        "lms_needed": True,
        "parameters": LMS_EVERYTHING,
        "peak_bytes_without_lms": 2 * budget,
        "peak_op_without_lms": "googlenet_1/conv2_1/Relu",
        "peak_bytes_with_lms": budget - MIB,
        "peak_op_with_lms": op,
        "host_peak_bytes": budget,
        "swapped_tensors": 40,
        "swap_ins": 52,
        "swapped_bytes": budget,
        "swapped_in_bytes": budget,
        "simulations": 9,
        "peak": {"step": 0, "steps": 0, "buffers": []},
        "analysis": {
            "vertices": 2559,
            "edges": 4677,
            "levels": 161,
            "learning_parameter_bytes": 28 * MIB,
            "variable_bytes": variable_bytes,
            "input_bytes": input_bytes,
            "largest_op": {"name": op, "bytes": op_bytes},
            "unknown_size_tensors": 0,
            "kernels": "onednn",
        },
        "timings_s": {"analysis": 1.0, "tuning": 2.0, "rewrite": 0.5},
    }


RELU_GRAD = "gradient_tape/googlenet_1/conv1_1/ReluGrad"
POOL_GRAD = "gradient_tape/googlenet_1/pool1_1/MaxPool2d/MaxPoolGrad"


def traffic(copy, out_seconds=None, in_seconds=None):
    """An LMS record's swap traffic (version 2): 131 MiB out, 189 MiB in per step."""
    out_bytes, in_bytes = 131 * 2**20, 189 * 2**20
    return {
        "version": 2,
        "source": "host-store",
        "copy": copy,
        "steps": 5,
        "swap_outs_per_step": 143,
        "swap_ins_per_step": 194,
        "out_bytes_per_step": out_bytes,
        "in_bytes_per_step": in_bytes,
        "out_seconds_per_step": out_seconds,
        "in_seconds_per_step": in_seconds,
        "out_bandwidth": out_bytes / out_seconds if out_seconds else None,
        "in_bandwidth": in_bytes / in_seconds if in_seconds else None,
        "link": {"bandwidth": 2e9, "latency": 0.0} if copy == "emulated link" else None,
    }


def trial(values: dict) -> TrialRecord:
    """A hand-made trial record (`record`, edited) as the report reads it."""
    return TrialRecord.from_dict(values, "hand-made trial record")


def write_record(results_dir: Path, values: dict) -> None:
    """Append a hand-made trial or search record to `results_dir` as the suite does: typed and
    checked first."""
    if "search_hash" in values:
        append_search(results_dir, SearchRecord.from_dict(values, "hand-made search record"))
    else:
        append_trial(results_dir, trial(values))
