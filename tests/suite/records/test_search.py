import json
import logging

import pytest
from record_cases import search_values

from suite.records import (
    Boundary,
    DamagedRecord,
    PredictionRecord,
    Probe,
    SearchRecord,
    append,
    append_prediction,
    load,
    load_predictions,
    read_prediction,
    write_prediction,
)


def test_a_search_record_reads_typed_and_writes_back_what_it_read(tmp_path):
    values = search_values()
    record = SearchRecord.from_dict(values, "test")
    assert record.range == (1, 8, 1) and record.params.batch is None
    assert isinstance(record.boundary, Boundary) and record.boundary.limit.processes[0].repeat == 0
    assert record.trials[0].images_per_sec == 2.0 and record.prediction.largest_fit == 4
    assert json.loads(json.dumps(record.to_dict())) == values
    append(tmp_path / "s.jsonl", record)
    assert load(tmp_path / "s.jsonl", SearchRecord) == [record]


@pytest.mark.parametrize(
    "changes, problem",
    [
        (
            {"boundary": {**search_values()["boundary"], "verdict": "sure"}},
            "field 'boundary.verdict' = 'sure' is not one of clear, confirmed, uncertain",
        ),
        ({"boundary": "confirmed"}, "field 'boundary' = \"confirmed\" is invalid"),
        ({"range": [1, 8]}, "field 'range' = [1, 8] is invalid; allowed: a list of three"),
        ({"trials": [{"value": 4}]}, "record lacks required field 'trials.0.spec_hash'"),
        ({"failed_outcome": "boom"}, "field 'failed_outcome' = 'boom' is not one of ok,"),
        ({"mode": "both"}, "field 'mode' = 'both' is not one of off, on"),
    ],
)
def test_a_search_record_the_report_could_not_render_is_skipped(tmp_path, caplog, changes, problem):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(search_values(**changes)) + "\n")
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert load(path, SearchRecord) == []
    (warning,) = caplog.messages
    assert problem in warning and warning.endswith("`inv search` of its spec runs the search again")
    with pytest.raises(DamagedRecord, match="field"):
        SearchRecord.from_dict(search_values(**changes), "x")


def test_predictions_round_trip_and_the_childs_answer_is_read_typed(tmp_path):
    record = PredictionRecord(
        "abc",
        2,
        {0: Probe(True, 100, 80, 90, 70), 3: Probe(False, 100)},
        1.5,
        "2026-01-01T00:00:00+00:00",
    )
    append_prediction(tmp_path, "h1", record)
    assert load_predictions(tmp_path, "h1") == [record]
    answer = tmp_path / "answer.json"
    write_prediction(answer, record)
    assert read_prediction(answer) == record
    answer.write_text('{"search_hash": "abc", "largest_fit": "two", "probes": {}}')
    with pytest.raises(DamagedRecord, match="field 'largest_fit' = \"two\""):
        read_prediction(answer)
