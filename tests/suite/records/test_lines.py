import json
import logging

import pytest
from record_cases import trial_values

from suite.errors import RecordError
from suite.records import DamagedRecord, TrialRecord, append, load


def trial(**changes) -> TrialRecord:
    return TrialRecord.from_dict(trial_values(**changes), "test")


def test_append_and_load_round_trip_typed(tmp_path):
    path = tmp_path / "h1.jsonl"
    first, second = trial(repeat=0), trial(repeat=1, outcome="timed_out", metrics=None)
    append(path, first)
    append(path, second)
    assert load(path, TrialRecord) == [first, second]
    assert load(tmp_path / "missing.jsonl", TrialRecord) == []


def test_torn_last_line_is_skipped_and_sealed_by_the_next_append(tmp_path):
    path = tmp_path / "h1.jsonl"
    append(path, trial(repeat=0))
    with open(path, "a") as handle:  # what a writer killed mid-line would leave
        handle.write(json.dumps(trial_values(repeat=1))[:40])
    assert [r.repeat for r in load(path, TrialRecord)] == [0]
    append(path, trial(repeat=2))
    assert [r.repeat for r in load(path, TrialRecord)] == [0, 2]


def test_a_newer_schema_is_refused_with_instructions(tmp_path):
    path = tmp_path / "h1.jsonl"
    path.write_text(json.dumps(trial_values(schema=99)) + "\n")
    with pytest.raises(
        RecordError, match=r"h1.jsonl:1: record schema version 99.*versions 1 and 2"
    ):
        load(path, TrialRecord)


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"outcome": "exploded"}, "outcome 'exploded' is not one of ok, out_of_memory"),
        ({"metrics": None}, "an 'ok' record must carry metrics with 'images_per_sec'"),
        ({"repeat": "0"}, "field 'repeat' = \"0\" is invalid; allowed: an integer"),
    ],
)
def test_invalid_records_cannot_be_built(changes, message):
    with pytest.raises(DamagedRecord, match=message):
        trial(**changes)


@pytest.mark.parametrize(
    "changes, field, allowed",
    [
        ({"metrics": {"images_per_sec": "fast"}}, "metrics.images_per_sec", "a table"),
        (
            {"metrics": {"images_per_sec": {"mean": "fast", "stderr": 0.1}}},
            "metrics.images_per_sec.mean",
            "a number",
        ),
        (
            {
                "metrics": {
                    "images_per_sec": {"mean": 1.0, "stderr": 0.1},
                    "peak_memory_bytes": "big",
                }
            },
            "metrics.peak_memory_bytes",
            "an integer or null",
        ),
        (
            {
                "metrics": {
                    "images_per_sec": {"mean": 1.0, "stderr": 0.1},
                    "machine_speed": {"mean": None},
                }
            },
            "metrics.machine_speed.before",
            "",
        ),
        (
            {"metrics": {"images_per_sec": {"mean": 1.0, "stderr": 0.1}, "speed": 3}},
            "metrics.speed",
            "is not a metric this suite knows",
        ),
        (
            {"params": {**trial_values()["params"], "resolution": "224"}},
            "params.resolution",
            "an integer",
        ),
        (
            {"params": {**trial_values()["params"], "workload": "alexnet"}},
            "params",
            "unknown workload 'alexnet'",
        ),
        ({"repeat": "0"}, "repeat", "an integer"),
        ({"host": None}, "host", "a string"),
        ({"metrics": {"pixels_per_sec": {"mean": 1.0, "stderr": 0.1}}}, "images_per_sec", ""),
    ],
)
def test_a_record_the_report_could_not_render_is_skipped_with_file_line_and_field(
    tmp_path, caplog, changes, field, allowed
):
    """What the report reads must be there with its type: a hand-edited `images_per_sec: "fast"`
    is skipped (one warning naming file:line, the field, what is allowed and what to run), the
    rest stands."""
    path = tmp_path / "h1.jsonl"
    append(path, trial(repeat=0))
    with open(path, "a") as handle:  # written by hand or another tool: append refuses it
        handle.write(json.dumps(trial_values(**{"repeat": 1, **changes})) + "\n")
    append(path, trial(repeat=2))
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert [r.repeat for r in load(path, TrialRecord)] == [0, 2]
    (warning,) = caplog.messages
    assert warning.startswith(f"{path}:2: skipping a damaged record: ")
    assert f"'{field}'" in warning and allowed in warning
    assert warning.endswith("; `inv run` of its spec runs the trial again")


def test_writing_refuses_a_record_that_would_not_load_back(tmp_path):
    record = trial()
    object.__setattr__(record, "host", 7)  # a frozen record forced: what a broken tool could do
    with pytest.raises(DamagedRecord, match="field 'host' = 7 is invalid"):
        append(tmp_path / "h.jsonl", record)
    assert not (tmp_path / "h.jsonl").exists()
