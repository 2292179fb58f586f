"""Run a spec on this host, natively: its trials, switch sweeps and limit searches.

Every trial is looked up in the host's records first (by spec hash and repeat) and only run when
missing, so an interrupted run resumes where it stopped and trials shared between studies run
once. Progress lines say trial k of n and an ETA. A Slurm host with `max_jobs` > 1 has that
many of a spec's trials in its queue at once (sweeps and searches decide each trial from the
last, so they stay one at a time).

Stopping: inside `run_spec`, SIGINT and SIGTERM raise `RunInterrupted`
(suite/running/interrupts.py); the trial in flight is stopped where it runs (its process group
killed, its Slurm job cancelled) without a record, and the run ends with one line saying what was
stopped and what was kept. The run stays marked unfinished (suite/running/resume.py): a rerun
redoes only what has no record, under the same run id.
"""

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from suite.errors import SuiteError
from suite.records import SearchRecord, existing_writable_directory, writable_directory
from suite.running.boundary import margin_text
from suite.running.executor import TrialExecutor, default_host_name, format_eta
from suite.running.interrupts import RunInterrupted, interruptible
from suite.running.resume import UnfinishedRun
from suite.running.searches import run_search
from suite.running.sweeps import run_switch_sweep
from suite.running.trial import interrupt_signal
from suite.specs import Spec


@dataclass
class RunSummary:
    results: Path
    planned: int
    skipped: int
    outcomes: dict = field(default_factory=dict)  # of the trials run now
    searches: list[SearchRecord] = field(default_factory=list)


def summary_lines(summary: RunSummary) -> list[str]:
    """What `inv run` prints at the end: where the records are, and each search's limit."""
    lines = [f"records: {summary.results} ({summary.outcomes or 'nothing new'})"]
    for search in summary.searches:
        lines.append(
            f"limit {search.spec.study} LMS {search.mode}: {search.searched} "
            f"{search.largest_ok} trains, {search.smallest_failed or 'none'} does not "
            f"(peak/budget {margin_text(search)}; {len(search.trials)} trials)"
        )
    return lines


def search_studies(spec: Spec, study: str | None) -> tuple:
    """The limit-search studies `inv search` runs: `study`, or all of the spec's."""
    names = tuple(s.study for s in spec.searches)
    if not names:
        raise SuiteError(f"spec {spec.name} ({spec.source}) has no limit search study")
    if study is None:
        return names
    if study not in names:
        raise SuiteError(
            f"{spec.source}: study {study!r} is not a max-resolution or max-batch study; "
            f"those are: {', '.join(names)}"
        )
    return (study,)


def search_command(
    spec: Spec, study: str | None, results_dir, host=None, force=False, host_disk=None
) -> list:
    """`inv search`: the spec's limit searches (`study`, or all of them) run here, recorded in
    `results_dir` (a path or its text, checked after the study), with `host_disk` lent to LMS
    (checked last, before any trial); what it prints."""
    studies = search_studies(spec, study)
    results_dir = writable_directory(Path(results_dir), "--results")
    disk = host_disk_option(host_disk)
    return summary_lines(run_spec(spec, results_dir, host, force, studies=studies, host_disk=disk))


def host_disk_option(value) -> Path | None:
    """`--host-disk DIR` (or invoke.yaml suite.host_disk): the directory this host lends LMS's
    host store, checked once before any trial (it exists, is a directory, can be written);
    None when not given."""
    if value in (None, ""):
        return None
    return existing_writable_directory(value, "--host-disk")


def run_trials(spec: Spec, executor: TrialExecutor, summary: RunSummary, round_=None) -> None:
    # repeats interleaved: round r runs every trial's r-th process, so that what the report
    # compares (LMS off vs on, one size vs another) meets the same minutes of machine load
    rounds = max((trial.repeats for trial in spec.trials), default=0)
    chosen = range(rounds) if round_ is None else [round_ - 1]
    planned = [(t, r) for r in chosen for t in spec.trials if r < t.repeats]
    todo = [(t, r) for t, r in planned if executor.done(t, r) is None]
    summary.planned, summary.skipped = len(planned), len(planned) - len(todo)
    executor.echo(
        f"spec {spec.name}: {len(planned)} trials; {summary.skipped} already recorded in "
        f"{executor.path}; {len(todo)} to run"
    )
    parallel = getattr(executor.place, "max_jobs", 1)  # a Slurm host may run several at once

    def run_one(index: int, trial, repeat: int) -> None:
        mean = executor.mean_trial_s()
        remaining = mean * (len(todo) - index + 1) / parallel if mean else None
        executor.echo(
            f"[trial {index}/{len(todo)}] {trial.describe()} repeat {repeat + 1}/"
            f"{trial.repeats} [{trial.hash}] {format_eta(remaining)}"
        )
        executor.run(trial, repeat, spec)

    if parallel == 1 or len(todo) < 2:
        for index, (trial, repeat) in enumerate(todo, start=1):
            run_one(index, trial, repeat)
        return
    with ThreadPoolExecutor(min(parallel, len(todo))) as pool:
        futures = [pool.submit(run_one, i, t, r) for i, (t, r) in enumerate(todo, start=1)]
        try:
            for future in futures:
                future.result()  # the first error, after the others have ended
        except (RunInterrupted, KeyboardInterrupt) as error:  # only this thread gets signals
            executor.stop(interrupt_signal(error))  # the threads' jobs end
            pool.shutdown(wait=True, cancel_futures=True)  # and nothing new starts
            raise


def run_spec(
    spec: Spec,
    results_dir: Path,
    host: str | None = None,
    force: bool = False,
    echo=print,
    extra_env: dict | None = None,
    studies: tuple | None = None,
    round_: int | None = None,
    run_id: str | None = None,
    place=None,
    host_disk: Path | None = None,
) -> RunSummary:
    """Run `spec` (only `studies` if given): trials, then switch sweeps, then limit searches.
    `round_` r: only every trial's r-th process, and the sweeps and searches in round 1 (a
    dispatcher interleaving places that share this machine runs the rounds in turn). `place`:
    where the trial processes run when not here (a Slurm host: each one a job). `host_disk`:
    a directory (checked: `host_disk_option`) lent to every LMS trial's host store.

    `run_id`: the run the records belong to (rounds of an interleaved run share one). Without
    it, the run of `spec` this host left unfinished in `results_dir` is continued, if any
    (suite/running/resume.py), unless `force`."""
    if studies is not None:
        spec = select_studies(spec, studies)
    host = host or default_host_name()
    marker = None if run_id else UnfinishedRun(results_dir, host, spec)
    if marker is not None:
        run_id, resumed = marker.begin(fresh=force)
        if resumed:
            echo(f"spec {spec.name}: resuming run {run_id}, which did not complete")
    executor = TrialExecutor(results_dir, host, force, echo, extra_env, run_id, place, host_disk)
    with interruptible():
        try:
            summary = _run(spec, executor, round_)
        except (RunInterrupted, KeyboardInterrupt) as error:
            raise executor.interruption(error) from None
    if marker is not None:
        marker.finish()
    return summary


def _run(spec: Spec, executor: TrialExecutor, round_: int | None) -> RunSummary:
    summary = RunSummary(executor.path, 0, 0, executor.outcomes)
    if spec.trials:
        run_trials(spec, executor, summary, round_)
    if round_ not in (None, 1):  # later rounds: the trials' next processes only
        return summary
    for sweep in spec.switch_sweeps:
        run_switch_sweep(sweep, spec, executor)
    for search in spec.searches:
        for mode in search.modes:
            summary.searches.append(run_search(search, mode, spec, executor))
    return summary


def select_studies(spec: Spec, studies: tuple) -> Spec:
    """`spec` with only the named studies; an unknown name is an error listing the known ones."""
    known = [t.study for t in spec.trials] + [s.study for s in spec.switch_sweeps]
    known += [s.study for s in spec.searches]
    for name in studies:
        if name not in known:
            raise SuiteError(
                f"spec {spec.name} ({spec.source}) has no study {name!r}; its studies: "
                f"{', '.join(dict.fromkeys(known))}"
            )
    return Spec(
        spec.name,
        spec.description,
        spec.source,
        [t for t in spec.trials if t.study in studies],
        [s for s in spec.searches if s.study in studies],
        [s for s in spec.switch_sweeps if s.study in studies],
    )


__all__ = ["RunSummary", "host_disk_option", "run_spec", "select_studies"]
