"""The limits table (suite/reporting/limits_table.py) with splitting (issue 31): a search whose
LMS table asks for `split` gets its own columns beside swapping's, and every limit says what set
it, from the failed trial's error."""

import pytest
from report_cases import HOST, LMS_EVERYTHING, record, search_record, write_record

from suite.records import store_host
from suite.reporting.limits_table import failure_cause
from suite.reporting.report import render_report

FLOOR_ERROR = (
    "NothingFitsError: no LMS parameters fit the budget of 270 MiB: the best simulated peak is "
    "301 MiB (without LMS 2.41 GiB); splitting cannot lower the floor: "
    "gradient_tape/googlenet_1/pool1_1/LRNGrad: LRNGrad is not split yet"
)
SWAP_ERROR = (
    "NothingFitsError: no LMS parameters fit the budget of 270 MiB: the best simulated peak is "
    "330 MiB (without LMS 590 MiB); the largest operation, googlenet_1/pool1_1/MaxPoolGrad, "
    "needs 161 MiB"
)


def _search(tmp_path, ref, mode, largest, failed, error, split=None, disks=()):
    """A search's record and its failed trial's; with `disks` (lms.DiskUsage tables), one
    trained trial at the limit per disk it was lent."""
    made = search_record("alpha", ref, "max-resolution", mode, largest, failed)
    if split:
        made["search_hash"] += "-split"
        made["lms"] = {**LMS_EVERYTHING, "split": split}
    spec_hash = f"{made['search_hash']}-{failed}"
    trial = record("alpha", ref, spec_hash, 1.0, 0.1, outcome="out_of_memory")
    trial["error"] = error
    write_record(tmp_path, trial)
    made["trials"] = [_entry(failed, spec_hash, "out_of_memory")]
    for repeat, disk in enumerate(disks):
        limit_hash = f"{made['search_hash']}-{largest}"
        trained = record("alpha", ref, limit_hash, 1.0, 0.1, resolution=largest, repeat=repeat)
        trained["metrics"]["lms_disk"] = disk
        write_record(tmp_path, trained)
        made["trials"].append({**_entry(largest, limit_hash, "ok"), "repeat": repeat})
    write_record(tmp_path, made)


def _entry(value: int, spec_hash: str, outcome: str) -> dict:
    """A search record's line for one trial process."""
    return {
        "value": value,
        "spec_hash": spec_hash,
        "outcome": outcome,
        "reused": False,
        "peak_memory_bytes": None,
        "images_per_sec": None,
        "repeat": 0,
    }


def _disk(peak: int, write: float | None = None, read: float | None = None) -> dict:
    """What `LMS.disk_usage()` records of a disk lent to the host store (lms.DiskUsage)."""
    return {"directory": "/scratch", "peak_bytes": peak, "write_bandwidth": write,
            "read_bandwidth": read}  # fmt: skip


def _cells(tmp_path) -> dict:
    text = render_report(tmp_path, tmp_path / "out").read_text()
    limits = text[text.index("## Limits") :]
    lines = [line for line in limits.splitlines() if line.startswith("|")]
    headers = [c.strip() for c in lines[0].split("|")[1:-1]]
    row = next(line for line in lines if line.startswith("| googlenet"))
    return dict(zip(headers, [c.strip() for c in row.split("|")[1:-1]], strict=True))


def test_a_search_with_splitting_gets_its_columns_and_each_limit_says_what_set_it(tmp_path):
    ref = store_host(tmp_path, HOST)
    measured = "measured peak 461830912 B exceeds the memory budget 419430400 B (emulated device)"
    _search(tmp_path, ref, "off", 160, 192, measured)
    _search(tmp_path, ref, "on", 256, 288, SWAP_ERROR)
    _search(tmp_path, ref, "on", 512, 544, FLOOR_ERROR, split="auto")
    cells = _cells(tmp_path)
    assert (cells["LMS on"], cells["with splitting"]) == ("256", "512")
    assert cells["gain with splitting"] == "10.24× pixels"  # (512 / 160)²
    assert cells["what set the limits"] == (
        "off: out of memory at 192 (measured peak 440 MiB over 400 MiB); "
        "on: out of memory at 288 (largest op pool1_1/MaxPoolGrad); "
        "split: out of memory at 544 (floor op pool1_1/LRNGrad cannot be split)"
    )


def test_without_searches_with_splitting_the_table_keeps_its_columns(tmp_path):
    ref = store_host(tmp_path, HOST)
    _search(tmp_path, ref, "off", 160, 192, "boom")
    _search(tmp_path, ref, "on", 256, 288, SWAP_ERROR)
    cells = _cells(tmp_path)
    assert "with splitting" not in cells and cells["LMS on"] == "256"
    assert cells["what set the limits"].startswith("off: out of memory at 192 (boom); on: ")


def test_a_plan_refused_for_the_disk_says_so_and_one_for_the_host_memory_too(tmp_path):
    """lms's own refusals (lms.check_host_memory) as the table names them: with `host_disk` the
    disk's free space set the limit, without it the host's memory."""
    import lms

    device, host = 100 * 2**20, 2**30
    causes = []
    for disk in (tmp_path, None):
        with pytest.raises(lms.HostMemoryError) as refused:
            lms.check_host_memory(2**62, device, True, 2 * device, disk=disk)
        causes.append(failure_cause(str(refused.value)))
    assert causes == [
        "host disk: the plan needs more than the disk has",
        "host memory: the plan needs more than the host has",
    ]
    assert lms.check_host_memory(host, device, True, 2 * device, disk=tmp_path) > 0  # it fits


def test_a_limit_reached_with_a_disk_says_what_the_disk_held_and_how_fast_it_was(tmp_path):
    """`inv search --host-disk`: the limit LMS reached with the host store's disk says so (the
    process whose disk held the most), apart from a RAM-bound limit; a disk the store never
    measured (nothing spilled by plan) has no speed to show."""
    ref = store_host(tmp_path, HOST)
    _search(tmp_path, ref, "off", 160, 192, "boom")
    lent = [_disk(2**30, 5e8, 9e8), _disk(int(3.2 * 2**30), 3e8, 1.2e9)]
    _search(tmp_path, ref, "on", 256, 288, SWAP_ERROR, disks=lent)
    _search(tmp_path, ref, "on", 512, 544, FLOOR_ERROR, "auto", [_disk(0)])
    cells = _cells(tmp_path)
    assert cells["LMS on"] == "256 (disk: 3.2 GiB peak, 0.3 GB/s write, 1.2 read)"
    assert cells["with splitting"] == "512 (disk: 0 B peak)"
    assert cells["LMS off"] == "160"
