"""Limit searches: the largest resolution (batch fixed) or batch (resolution fixed) that trains,
with LMS off or on, found with few real trials.

1. Bracket with the simulator (`suite.running.predict`, a child process): where should the
   boundary be?
2. Confirm and refine with real, isolated trials (`suite.running.bracket`): the prediction and its
   neighbour, then gallop and bisect if the prediction was off. A trial that is not `ok` (out of
   memory, crash, time-out) marks "does not train here"; it is recorded like any trial.
3. Weigh the boundary (`suite.running.boundary`): the measured peaks at the largest size that
   trained and at the smallest that did not, against the budget. Where one lies within the
   between-process spread of the budget, both sizes run in the spec's `boundary_repeats` more
   processes (repeat 1, 2, ... of the same trial, in rounds), and the limit is "confirmed" when
   they agree, else "uncertain"; far from the budget it is "clear".
4. Append one search record: the largest value that trained, the smallest that did not, every trial
   behind them (by spec hash and repeat), the boundary's margin and verdict, and the prediction.

Resume: a recorded search is not redone; an interrupted one redoes only what is not recorded (its
finished trials, repeats included, and its prediction are reused from the host's records).
"""

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from suite.environment import child_environment
from suite.records import (
    Boundary,
    BoundarySide,
    DamagedRecord,
    PredictionRecord,
    SearchPrediction,
    SearchRecord,
    SearchTrial,
    SpecRef,
    TrialRecord,
    append_prediction,
    append_search,
    load_predictions,
    load_searches,
    log_file,
    read_prediction,
    utc_now,
)
from suite.running.boundary import boundary_record, is_near, margin_text, process_margin
from suite.running.bracket import bracket_search
from suite.running.executor import TrialExecutor, format_eta
from suite.specs import Search, Spec, Trial


def predict_boundary(search: Search, mode: str, executor: TrialExecutor) -> PredictionRecord:
    """The simulator's boundary for this search (cached in the host's prediction records)."""
    search_hash = search.hash(mode)
    if not executor.force:
        for record in load_predictions(executor.results_dir, executor.host):
            if record.search_hash == search_hash:
                return record
    candidates = [search.trial(value, mode).params.to_dict() for value in search.candidates]
    log_path = log_file(executor.results_dir, executor.host, f"predict-{search_hash}")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = child_environment(executor.extra_env)
    with tempfile.TemporaryDirectory(prefix="suite-predict-") as tmp:
        request, answer = Path(tmp) / "request.json", Path(tmp) / "answer.json"
        disk = executor.host_disk and str(executor.host_disk)  # where the trials' host arrays go
        request.write_text(
            json.dumps(
                {"candidates": candidates, "mode": mode, "search_hash": search_hash, "disk": disk}
            )
        )
        with open(log_path, "w") as log:
            try:
                completed = subprocess.run(
                    [
                        sys.executable,
                        "-m",
                        "suite.running.predict",
                        str(request),
                        str(answer),
                        f"--parent={os.getpid()}",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=env,
                    timeout=search.timeout_s,
                )
                failed = completed.returncode != 0 or not answer.exists()
            except subprocess.TimeoutExpired:
                failed = True
        if failed:
            tail = log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            # not cached: a failed prediction is retried by a resumed search
            return PredictionRecord(search_hash, None, error=tail[0][:300])
        try:
            record = read_prediction(answer)
        except DamagedRecord as error:  # not cached either
            return PredictionRecord(search_hash, None, error=str(error)[:300])
    record = dataclasses.replace(record, recorded_at=utc_now())
    append_prediction(executor.results_dir, executor.host, record)
    return record


def run_search(search: Search, mode: str, spec: Spec, executor: TrialExecutor) -> SearchRecord:
    """Run (or resume, or reuse) the `mode` search of `search`; return its search record."""
    echo = executor.echo
    search_hash = search.hash(mode)
    if not executor.force:
        for record in load_searches(executor.results_dir, executor.host):
            if record.search_hash == search_hash:
                echo(f"search {search.study} ({search.describe(mode)}): recorded [{search_hash}]")
                return record
    values = search.candidates
    started = utc_now()
    echo(
        f"search {search.study} ({search.describe(mode)}) [{search_hash}]: {search.searched} "
        f"{values[0]}..{values[-1]} step {search.step} ({len(values)} candidates)"
    )
    prediction = predict_boundary(search, mode, executor)
    predicted = prediction.largest_fit
    if predicted is None:
        echo(f"    no prediction ({prediction.error}): searching from {values[0]}")
    else:
        shown = values[predicted] if predicted >= 0 else f"nothing (below {values[0]})"
        echo(
            f"    simulator: largest that fits {shown} "
            f"({len(prediction.probes)} sizes traced, {prediction.seconds} s)"
        )
    trials, records = [], {}

    def probe(index: int) -> bool:
        trial = search.trial(values[index], mode)
        record, reused = _run(executor, trial, 0, spec, search_hash)
        records[index] = record
        trials.append(_trial_entry(values[index], trial, record, reused))
        return record.ok

    def on_probe(bracket, index):
        low = values[bracket.passed] if bracket.passed >= 0 else "-"
        high = values[bracket.failed] if bracket.failed < len(values) else "-"
        mean = executor.mean_trial_s()
        eta = format_eta(mean * bracket.remaining_probes() if mean else None)
        echo(
            f"[search {search.study} LMS {mode} trial {len(bracket.probes) + 1}] "
            f"{search.searched} {values[index]}: bracket trains<={low} fails>={high} {eta}"
        )

    bracket = bracket_search(len(values), probe, predicted, on_probe)
    largest = values[bracket.passed] if bracket.passed >= 0 else None
    smallest = values[bracket.failed] if bracket.failed < len(values) else None
    boundary = confirm_boundary(search, mode, spec, executor, (largest, smallest), trials)
    record = SearchRecord(
        kind=search.kind,
        search_hash=search_hash,
        limit_key=search.limit_key,
        mode=mode,
        spec=SpecRef(spec.name, search.study, spec.source),
        params=search.params,
        lms=search.lms if mode == "on" else None,
        searched=search.searched,
        range=(search.start, search.stop, search.step),
        largest_ok=largest,
        smallest_failed=smallest,
        failed_outcome=records[bracket.failed].outcome if smallest is not None else None,
        stop_reached=bracket.passed == len(values) - 1,
        trials=tuple(trials),
        trials_run=sum(1 for t in trials if not t.reused),
        boundary=boundary,
        prediction=SearchPrediction(
            values[predicted] if predicted is not None and predicted >= 0 else None,
            predicted == -1,
            prediction.seconds,
            prediction.error,
        ),
        host=executor.host,
        host_ref=executor.host_ref,
        started_at=started,
        finished_at=utc_now(),
    )
    append_search(executor.results_dir, record)
    beyond = f"fails at {smallest} ({record.failed_outcome})" if smallest else "stop reached"
    echo(
        f"    {search.searched} limit, LMS {mode}: trains at {largest}, {beyond}; peak/budget "
        f"{margin_text(record)}; {len(trials)} trials ({record.trials_run} run now)"
    )
    return record


def _run(executor: TrialExecutor, trial, repeat: int, spec: Spec, search_hash: str):
    """The trial's record (recorded or run now, tagged with the search) and whether it was
    recorded already."""
    reused = executor.done(trial, repeat) is not None
    return executor.run(trial, repeat, spec, {"search": search_hash}), reused


def _trial_entry(value: int, trial, record: TrialRecord, reused: bool) -> SearchTrial:
    """A search record's line for one trial process."""
    metrics = record.metrics
    peak = metrics.peak_memory_bytes if metrics else None
    rate = metrics.images_per_sec.mean if metrics and metrics.images_per_sec else None
    return SearchTrial(value, trial.hash, record.repeat, record.outcome, reused, peak, rate)


@dataclass
class _Side:
    """A boundary size being weighed: its value, its trial, and the records of its processes."""

    value: int
    trial: Trial
    records: list[TrialRecord]


def confirm_boundary(
    search: Search, mode: str, spec: Spec, executor: TrialExecutor, sizes: tuple, trials: list
) -> Boundary:
    """The boundary of a bracketed search (`sizes`: the largest value that trained, the smallest
    that did not, None where absent), with its margin and verdict (`suite.running.boundary`).

    Repeats already recorded (1..boundary_repeats, from an interrupted search or another study
    of the same trial) count before deciding; when a side is near the budget, the missing ones run
    now, in rounds (repeat r at both sizes before r + 1), like every trial tagged with the search
    and appended to `trials`."""
    budget, band = search.params.memory_budget_bytes, search.boundary_spread
    search_hash, echo = search.hash(mode), executor.echo
    sides = {}
    for name, value in zip(("limit", "failed"), sizes, strict=True):
        if value is None:
            continue
        trial = search.trial(value, mode)
        known = [executor.done(trial, r) for r in range(search.boundary_repeats + 1)]
        sides[name] = _Side(value, trial, [r for r in known if r])

    def side(name) -> BoundarySide | None:
        found = sides.get(name)
        if found is None:
            return None
        processes = tuple(process_margin(r, budget) for r in found.records)
        return BoundarySide(found.value, found.trial.hash, processes)

    for found in sides.values():  # repeats recorded earlier stand behind the limit too
        for record in found.records[1:]:
            trials.append(_trial_entry(found.value, found.trial, record, True))
    if search.boundary_repeats and is_near(side("limit"), side("failed"), budget, band):
        shown = " and ".join(str(found.value) for found in sides.values())
        echo(
            f"    a peak within the between-process spread of the budget: {search.searched} "
            f"{shown} in {search.boundary_repeats} more processes each"
        )
        for repeat in range(1, search.boundary_repeats + 1):
            for found in sides.values():
                if executor.done(found.trial, repeat) is not None:
                    continue
                echo(
                    f"[search {search.study} LMS {mode} boundary {repeat}/"
                    f"{search.boundary_repeats}] {search.searched} {found.value}"
                )
                record, _ = _run(executor, found.trial, repeat, spec, search_hash)
                found.records.append(record)
                trials.append(_trial_entry(found.value, found.trial, record, False))
    for found in sides.values():
        found.records.sort(key=lambda r: r.repeat)
    return boundary_record(side("limit"), side("failed"), budget, band, search.boundary_repeats)
