import json

import pytest

from suite.errors import RecordError
from suite.records import (
    SCHEMA_VERSION,
    append_record,
    load_host,
    load_records,
    record_params,
    store_host,
    validate_record,
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
        ({"repeat": "0"}, "field 'repeat' has type str"),
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
