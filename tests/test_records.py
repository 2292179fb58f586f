import json
import logging

import pytest
from _unwritable import unwritable

from suite.errors import RecordError
from suite.records import (
    SCHEMA_VERSION,
    SEARCH_REQUIRED,
    DamagedRecord,
    append_record,
    load_host,
    load_records,
    readable_directory,
    record_params,
    store_host,
    validate_record,
    validate_search_record,
    writable_directory,
    writable_file,
    write_atomic,
)


def make_record(**changes):
    record = {
        "schema": SCHEMA_VERSION,
        "spec": {"name": "t", "study": "a", "source": "t.toml"},
        "spec_hash": "0123456789abcdef",
        "params": {"workload": "googlenet"},
        "repeat": 0,
        "host": "h1",
        "host_ref": "ffff",
        "outcome": "ok",
        "metrics": {"images_per_sec": {"mean": 1.0, "stderr": 0.1}},
        "error": None,
        "device": "CPU:0",
        "started_at": "2026-01-01T00:00:00+00:00",
        "finished_at": "2026-01-01T00:00:10+00:00",
        "wall_s": 10.0,
    }
    record.update(changes)
    return record


def test_append_and_load_round_trip(tmp_path):
    path = tmp_path / "h1.jsonl"
    append_record(path, make_record(repeat=0))
    append_record(path, make_record(repeat=1, outcome="timed_out", metrics=None))
    assert [r["repeat"] for r in load_records(path)] == [0, 1]


def test_torn_last_line_is_skipped_and_sealed_by_the_next_append(tmp_path):
    path = tmp_path / "h1.jsonl"
    append_record(path, make_record(repeat=0))
    with open(path, "a") as handle:  # what a writer killed mid-line would leave
        handle.write(json.dumps(make_record(repeat=1))[:40])
    assert [r["repeat"] for r in load_records(path)] == [0]
    append_record(path, make_record(repeat=2))
    assert [r["repeat"] for r in load_records(path)] == [0, 2]


def test_other_schema_versions_are_refused_with_instructions(tmp_path):
    path = tmp_path / "h1.jsonl"
    path.write_text(json.dumps(make_record(schema=99)) + "\n")
    with pytest.raises(RecordError, match=r"h1.jsonl:1: record schema version 99.*version 1"):
        load_records(path)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"outcome": "exploded"}, "outcome 'exploded'"),
        ({"metrics": None}, "must carry metrics"),
        ({"repeat": "0"}, "field 'repeat' has type str; allowed: int"),
        ({"metrics": {"images_per_sec": "fast"}}, "'metrics.images_per_sec' = \"fast\""),
    ],
)
def test_invalid_records_are_refused_on_write(tmp_path, changes, message):
    with pytest.raises(RecordError, match=message):
        append_record(tmp_path / "h.jsonl", make_record(**changes))
    assert not (tmp_path / "h.jsonl").exists()


def test_missing_field_is_named():
    record = make_record()
    del record["host_ref"]
    with pytest.raises(RecordError, match="lacks required field 'host_ref'"):
        validate_record(record, "x")


def test_host_descriptions_are_stored_once_by_content(tmp_path):
    ref = store_host(tmp_path, {"architecture": "x86_64"})
    assert store_host(tmp_path, {"architecture": "x86_64"}) == ref
    assert store_host(tmp_path, {"architecture": "ppc64le"}) != ref
    assert load_host(tmp_path, ref) == {"architecture": "x86_64"}


def test_a_host_description_that_does_not_match_its_hash_is_refused(tmp_path):
    ref = store_host(tmp_path, {"architecture": "x86_64", "cpu": {"cores": 2}})
    path = tmp_path / "hosts" / f"{ref}.json"
    path.write_text(json.dumps({"architecture": "x86_64", "cpu": {"cores": 64}}))
    with pytest.raises(RecordError, match=f"{ref}.json: its content does not match its hash"):
        load_host(tmp_path, ref)
    path.write_text("[1, 2")
    with pytest.raises(RecordError, match="not valid JSON"):
        load_host(tmp_path, ref)
    with pytest.raises(RecordError, match="'architecture' must be a string"):
        store_host(tmp_path, {"cpu": {}})


def test_write_atomic_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "deep" / "file.json"
    write_atomic(path, "first")
    write_atomic(path, "second")
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.json"]


def test_record_params_are_typed_and_a_foreign_shape_is_a_record_error():
    params = {
        "workload": "googlenet",
        "resolution": 64,
        "batch": 2,
        "precision": "fp32",
        "classes": 10,
        "steps": 3,
        "warmup_steps": 1,
        "data": {"kind": "synthetic"},
        "memory_budget_bytes": None,
        "seed": 0,
    }
    typed = record_params(make_record(params=params))
    assert (typed.workload, typed.batch, typed.lms) == ("googlenet", 2, None)
    assert typed.to_dict() == params  # the canonical form round-trips: the hash is unchanged
    with pytest.raises(RecordError, match="record 0123456789abcdef of host h1: .*missing"):
        record_params(make_record(params={"workload": "googlenet"}))


@pytest.mark.parametrize(
    "changes, field, allowed",
    [
        ({"metrics": {"images_per_sec": "fast"}}, "metrics.images_per_sec", "a table {mean"),
        ({"metrics": {"images_per_sec": {"mean": "fast", "stderr": 0.1}}},
         "metrics.images_per_sec", "of numbers"),
        ({"metrics": {"images_per_sec": {"mean": 1.0, "stderr": 0.1}, "peak_memory_bytes": "big"}},
         "metrics.peak_memory_bytes", "an integer or null"),
        ({"metrics": {"images_per_sec": {"mean": 1.0, "stderr": 0.1},
                      "machine_speed": {"mean": None}}}, "metrics.machine_speed", "'mean'"),
        ({"params": {"workload": "googlenet", "resolution": "224"}}, "params.resolution",
         "an integer"),
        ({"repeat": "0"}, "repeat", "int"),
        ({"metrics": {"pixels_per_sec": {"mean": 1.0, "stderr": 0.1}}}, "images_per_sec", ""),
    ],
)  # fmt: skip
def test_a_record_of_wrong_types_is_skipped_with_file_and_line_like_a_torn_one(
    tmp_path, caplog, changes, field, allowed
):
    """What the report reads must have its type: a hand-edited `images_per_sec: "fast"` is
    skipped (with a warning naming file:line, the field and what is allowed), the rest stands."""
    path = tmp_path / "h1.jsonl"
    append_record(path, make_record(repeat=0))
    with open(path, "a") as handle:  # written by hand or another tool: append_record refuses it
        handle.write(json.dumps(make_record(**{"repeat": 1, **changes})) + "\n")
    append_record(path, make_record(repeat=2))
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert [r["repeat"] for r in load_records(path)] == [0, 2]
    (warning,) = caplog.messages
    assert warning.startswith(f"{path}:2: skipping a damaged record: ")
    assert f"'{field}'" in warning and allowed in warning


def test_a_file_or_an_unwritable_directory_is_refused_naming_the_option(tmp_path):
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a directory")
    for check in (writable_directory, readable_directory):
        with pytest.raises(RecordError, match=f"^--results {a_file}: a file, not a directory"):
            check(a_file, "--results")
    with pytest.raises(RecordError, match=f"^--output {tmp_path}: a directory, not a file"):
        writable_file(tmp_path, "--output")
    with pytest.raises(RecordError, match="cannot write there \\(Not a directory\\)"):
        writable_directory(a_file / "deeper", "--output")
    made = writable_directory(tmp_path / "new" / "dir", "--output")  # missing: made
    assert made.is_dir() and list(made.iterdir()) == []  # the probe leaves nothing behind
    assert readable_directory(tmp_path / "missing", "--results") == tmp_path / "missing"
    with unwritable(tmp_path / "locked") as locked:
        with pytest.raises(RecordError, match=f"^--output {locked}: cannot write there "):
            writable_directory(locked, "--output")
        with pytest.raises(RecordError, match=f"^--output {locked}: cannot write there "):
            writable_file(locked / "baseline.json", "--output")


def test_a_search_records_boundary_must_carry_a_known_verdict():
    search = {
        "schema": 1,
        "search_hash": "abc",
        "limit_key": "k",
        "kind": "max-batch",
        "mode": "off",
        "params": {},
        "host": "h1",
        "trials": [],
        "largest_ok": 4,
        "smallest_failed": 5,
    }
    for name, kind in SEARCH_REQUIRED.items():  # whatever else a search record must have
        search.setdefault(name, kind())
    assert validate_search_record({**search, "boundary": {"verdict": "confirmed"}}, "s.jsonl")
    assert validate_search_record(search, "s.jsonl")  # records from before the boundary
    for bad in ({"verdict": "sure"}, "confirmed", []):
        with pytest.raises(DamagedRecord, match="'boundary' is invalid; allowed: .*confirmed"):
            validate_search_record({**search, "boundary": bad}, "s.jsonl")
