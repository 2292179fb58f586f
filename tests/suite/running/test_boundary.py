"""A limit's margin and verdict (suite.running.boundary) and how the limits table shows them.

The numbers of issue 27: GoogLeNet's LMS-off max batch under a 314.6 MB (300 MiB) budget was 8
in one smoke run and 7 in another; batch 8 peaked at 318.3 MB once and 302.9 MB once."""

import dataclasses
import json
import logging

import pytest
from record_cases import search_values, trial_values

from suite.records import BoundarySide, ProcessMargin, SearchRecord, TrialRecord, load
from suite.reporting.limits_table import gain_text, limits_table
from suite.running.boundary import (
    boundary_record,
    is_near,
    margin_text,
    near_budget,
    process_margin,
    spread_bytes,
    verdict,
)

MIB = 2**20
BUDGET = 300 * MIB  # 314.6 MB
MB = 10**6


def trial(outcome, peak, repeat=0):
    """A trial record as the executor stores it."""
    rate = {"mean": 1.0, "stderr": 0.0}
    metrics = {"peak_memory_bytes": peak, **({"images_per_sec": rate} if outcome == "ok" else {})}
    values = trial_values(outcome=outcome, repeat=repeat, metrics=metrics)
    return TrialRecord.from_dict(values, "test")


def side(value, *processes, budget=BUDGET):
    """A boundary side from (outcome, peak) pairs, repeat 0, 1, ..."""
    made = tuple(process_margin(trial(o, p, r), budget) for r, (o, p) in enumerate(processes))
    return BoundarySide(value, f"h{value}", made)


def test_a_process_margin_is_the_budget_less_the_peak_and_the_peak_over_the_budget():
    assert process_margin(trial("out_of_memory", 318_300_000), BUDGET) == ProcessMargin(
        repeat=0,
        outcome="out_of_memory",
        peak_memory_bytes=318_300_000,
        margin_bytes=BUDGET - 318_300_000,
        peak_ratio=round(318_300_000 / BUDGET, 4),
    )
    refused = process_margin(trial("out_of_memory", None, repeat=2), BUDGET)
    assert refused.peak_memory_bytes is refused.margin_bytes is refused.peak_ratio is None
    unbudgeted = process_margin(trial("ok", 5 * MIB), None)
    assert unbudgeted.peak_memory_bytes == 5 * MIB and unbudgeted.peak_ratio is None


def test_the_spread_is_the_band_or_the_measured_range_where_wider():
    assert spread_bytes([200 * MIB], 0.1) == 20 * MIB
    assert spread_bytes([190 * MIB, 200 * MIB], 0.1) == 20 * MIB  # two that agree closely
    assert spread_bytes([150 * MIB, 200 * MIB], 0.1) == 50 * MIB


@pytest.mark.parametrize(
    "outcome, peaks, near",
    [
        ("ok", [0.95], True),  # another process could peak over the budget
        ("ok", [0.85], False),  # 0.85 + 0.085 < 1
        ("ok", [0.60, 0.85], True),  # their range (0.25) is the spread, not the band
        ("out_of_memory", [1.05], True),  # another process could fit
        ("out_of_memory", [1.20], False),
        ("out_of_memory", [None], False),  # refused outright: nothing says it was close
        ("crashed", [None], False),
        ("ok", [None], True),  # trained, peak unknown
    ],
)
def test_a_side_is_near_when_a_peak_lies_within_the_spread_of_the_budget(outcome, peaks, near):
    processes = [
        process_margin(trial(outcome, None if p is None else round(p * BUDGET)), BUDGET)
        for p in peaks
    ]
    assert near_budget(processes, BUDGET, 0.1) is near


def test_without_a_budget_every_side_is_near():
    assert near_budget([process_margin(trial("ok", MIB), None)], None, 0.1)


def test_verdicts():
    clear_limit, clear_failed = side(7, ("ok", 250 * MIB)), side(8, ("out_of_memory", None))
    assert boundary_record(clear_limit, clear_failed, BUDGET, 0.1, 2).verdict == "clear"
    # issue 27: batch 8 at 318.3 MB, 1 % over: near; not repeated, uncertain
    near_failed = side(8, ("out_of_memory", 318_300_000))
    one = boundary_record(clear_limit, near_failed, BUDGET, 0.1, 0)
    assert (one.near, one.verdict) == (True, "uncertain")
    # repeated: the next process trained batch 8 at 302.9 MB, so the limit is uncertain
    limit = side(7, ("ok", 250 * MIB), ("ok", 252 * MIB))
    flipped = side(8, ("out_of_memory", 318_300_000), ("ok", 302_900_000))
    assert boundary_record(limit, flipped, BUDGET, 0.1, 1).verdict == "uncertain"
    # or every process agreed: confirmed
    held = side(8, ("out_of_memory", 318_300_000), ("out_of_memory", 316_000_000))
    assert boundary_record(limit, held, BUDGET, 0.1, 1).verdict == "confirmed"
    # the limit at the stop of the range (no failing size), near the budget and repeated
    top = side(64, ("ok", 298 * MIB), ("ok", 297 * MIB), ("ok", 299 * MIB))
    assert boundary_record(top, None, BUDGET, 0.1, 2).verdict == "confirmed"
    # processes that disagree make a limit uncertain even far from the budget (recorded repeats)
    split = side(7, ("ok", 200 * MIB), ("crashed", None))
    assert verdict(split.processes, clear_failed.processes, False) == "uncertain"
    assert not is_near(split, clear_failed, BUDGET, 0.1)


def search(mode, largest, boundary=None, stop=False, smallest=None):
    """A search record of GoogLeNet's max batch at 224px under the budget."""
    params = {**search_values()["params"], "resolution": 224, "memory_budget_bytes": BUDGET}
    values = search_values(
        search_hash=f"s-{mode}",
        mode=mode,
        spec={"name": "s", "study": "b", "source": "s.toml"},
        params=params,
        lms={} if mode == "on" else None,
        range=[1, 64, 1],
        largest_ok=largest,
        smallest_failed=smallest,
        stop_reached=stop,
        trials=[],
        trials_run=0,
        host="h",
    )
    return dataclasses.replace(SearchRecord.from_dict(values, "test"), boundary=boundary)


def test_the_margin_text_says_the_verdict_then_each_side_over_the_budget():
    limit = side(7, ("ok", 280 * MB), ("ok", 276 * MB))
    flipped = side(8, ("out_of_memory", 318_300_000), ("ok", 302_900_000))
    uncertain = search("off", 7, boundary_record(limit, flipped, BUDGET, 0.1, 1), smallest=8)
    assert margin_text(uncertain) == "uncertain: 0.88–0.89 / 0.96–1.01"
    refused = boundary_record(
        side(18, ("ok", 200 * MIB)), side(19, ("out_of_memory", None)), BUDGET, 0.1, 2
    )
    assert margin_text(search("on", 18, refused)) == "clear: 0.67 / out of memory"
    top = boundary_record(side(64, ("ok", 150 * MIB)), None, BUDGET, 0.1, 2)
    assert margin_text(search("on", 64, top, stop=True)) == "clear: 0.50 / —"
    sides = side(5, ("ok", 300 * MIB), budget=None), side(6, ("out_of_memory", None), budget=None)
    unbudgeted = boundary_record(*sides, None, 0.1, 0)
    assert margin_text(search("off", 5, unbudgeted)) == "uncertain: 300 MiB / out of memory"
    # records from before the margin say so
    assert margin_text(search("off", 7)) == "not measured"


def test_a_schema_1_boundary_without_what_its_margin_is_shown_from_was_not_measured(tmp_path):
    """As the margin text read it before schema 2: such a record loads with no boundary."""
    boundary = search_values()["boundary"]
    damaged = {**boundary, "limit": {"value": 18, "processes": [{"outcome": "ok"}]}}
    path = tmp_path / "s.jsonl"
    lines = [search_values(schema=1, boundary=b) for b in (damaged, boundary)]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    old, whole = load(path, SearchRecord)
    assert old.boundary is None and margin_text(old) == "not measured"
    assert margin_text(whole) == "uncertain: 0.90 / —"


def test_a_schema_2_boundary_of_an_unknown_verdict_is_a_damaged_record(tmp_path, caplog):
    boundary = {**search_values()["boundary"], "verdict": "probably"}
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps(search_values(boundary=boundary)) + "\n")
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert load(path, SearchRecord) == []
    assert "field 'boundary.verdict' = 'probably' is not one of" in caplog.text


def test_the_limits_table_shows_each_margin_and_marks_a_gain_from_an_uncertain_limit():
    limit = side(7, ("ok", 280 * MB), ("ok", 276 * MB))
    flipped = side(8, ("out_of_memory", 318_300_000), ("ok", 302_900_000))
    off = search("off", 7, boundary_record(limit, flipped, BUDGET, 0.1, 1), smallest=8)
    clear = boundary_record(
        side(18, ("ok", 200 * MIB)), side(19, ("out_of_memory", None)), BUDGET, 0.1, 2
    )
    on = search("on", 18, clear, smallest=19)
    assert gain_text(off, on) == "2.57× batch (uncertain)"
    assert gain_text(search("off", 7), on) == "2.57× batch"  # an older record: not marked
    top = search(
        "on", 64, boundary_record(side(64, ("ok", 99 * MIB)), None, BUDGET, 0.1, 2), stop=True
    )
    assert gain_text(off, top) == "9.14× batch (at least, uncertain)"
    table = limits_table([off, on], [])
    header, _, row = table.splitlines()
    headers = [cell.strip() for cell in header.split("|")[1:-1]]
    cells = dict(zip(headers, (cell.strip() for cell in row.split("|")[1:-1]), strict=True))
    assert cells["LMS off"] == "7" and cells["LMS gain"] == "2.57× batch (uncertain)"
    assert cells["peak/budget off"] == "uncertain: 0.88–0.89 / 0.96–1.01"
    assert cells["peak/budget on"] == "clear: 0.67 / out of memory"
    # an older pair of records, and a search run with LMS on only
    old = dict(
        zip(
            headers,
            limits_table([search("off", 7), search("on", 18)], []).splitlines()[2].split("|")[1:-1],
            strict=True,
        )
    )
    assert [old[h].strip() for h in ("peak/budget off", "peak/budget on")] == ["not measured"] * 2
    alone = limits_table([on], []).splitlines()[2].split("|")[1:-1]
    assert [alone[headers.index(h)].strip() for h in ("peak/budget off", "peak/budget on")] == [
        "—",
        "clear: 0.67 / out of memory",
    ]


def test_inv_runs_summary_line_gives_each_limit_its_margin():
    from pathlib import Path

    from suite.running.runner import RunSummary, summary_lines

    limit = side(7, ("ok", 280 * MB), ("ok", 276 * MB))
    flipped = side(8, ("out_of_memory", 318_300_000), ("ok", 302_900_000))
    found = search("off", 7, boundary_record(limit, flipped, BUDGET, 0.1, 1), smallest=8)
    summary = RunSummary(Path("results"), 0, 0, searches=[found])
    assert summary_lines(summary)[1] == (
        "limit b LMS off: batch 7 trains, 8 does not "
        "(peak/budget uncertain: 0.88–0.89 / 0.96–1.01; 0 trials)"
    )
