"""A results directory of three nightly runs with known numbers, for the history's tests (and the
site's): GoogLeNet LMS off and on on one host, three trial processes each per night, a limit
search pair per night; night 2 runs 2x slower (LMS off), night 3 on TensorFlow 2.22.0."""

import copy
from pathlib import Path

from report_cases import HOST, record, search_record, write_record

from suite.records import store_host

NIGHTS = ("2026-11-01", "2026-11-02", "2026-11-03")
RUNS = ("night1aaaaaa", "night2bbbbbb", "night3cccccc")
RATES = {"off": (10.0, 10.2, 9.9), "on": (6.0, 6.1, 5.9)}  # images/sec per process, night 1
LMS_ON = {"swapout_threshold": -1, "swapin_ahead": -1, "swapin_groupby": -1}


def described(tensorflow: str = "2.21.0", bandwidth: float = 10.0) -> dict:
    """The host description, with a TensorFlow version and a measured memcpy bandwidth (which
    differs between captures of one host and is no change)."""
    description = copy.deepcopy(HOST)
    description["tensorflow_version"] = tensorflow
    description["link"]["memcpy_gbps"][-1] = bandwidth
    return description


def night_records(night: int, ref: str, slower: float = 1.0, host: str = "h1") -> list[dict]:
    """One night's trial records: LMS off and on, three processes each, rates / `slower` (LMS
    off only)."""
    records = []
    for mode, rates in RATES.items():
        for repeat, rate in enumerate(rates):
            value = record(host, ref, f"hash-{mode}", rate / (slower if mode == "off" else 1), 0.1)
            value["repeat"] = repeat
            value["run"] = RUNS[night]
            value["params"]["lms"] = LMS_ON if mode == "on" else None
            day = NIGHTS[night]
            value["started_at"] = f"{day}T02:3{repeat}:00+00:00"
            value["finished_at"] = f"{day}T02:3{repeat}:30+00:00"
            records.append(value)
    return records


def night_searches(night: int, ref: str, host: str = "h1") -> list[dict]:
    """A max-batch search pair, finished after the night's trials: 4 → 8 (night 3: 4 → 9)."""
    found = []
    for mode, largest in (("off", 4), ("on", 8 + (night == 2))):
        value = search_record(host, ref, "max-batch", mode, largest, largest + 1)
        value["started_at"] = f"{NIGHTS[night]}T02:40:00+00:00"
        value["finished_at"] = f"{NIGHTS[night]}T02:50:00+00:00"
        found.append(value)
    return found


def three_nights(results_dir: Path, host: str = "h1") -> Path:
    """Write the three nights into `results_dir`; return it."""
    for night in range(3):
        ref = store_host(results_dir, described("2.22.0" if night == 2 else "2.21.0", 10.0 + night))
        for value in night_records(night, ref, slower=2.0 if night == 1 else 1.0, host=host):
            write_record(results_dir, value)
        for value in night_searches(night, ref, host):
            write_record(results_dir, value)
    return results_dir
