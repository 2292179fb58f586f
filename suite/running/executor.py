"""The trial executor: runs one trial in its own process on this host and appends its record,
or returns the record already there (resume, and trials shared between studies run once).

An interrupted trial gets no record (a rerun redoes it); the executor keeps what it stopped so
that the run's last line can say so (`interruption`)."""

import os
import socket
import threading
import uuid
from pathlib import Path

from suite.hosts.description import IMAGE_DIGEST_VARIABLE, capture_host_description
from suite.records import (
    SpecRef,
    TrialRecord,
    TrialResult,
    append_trial,
    load_trials,
    log_file,
    results_file,
    store_host,
    utc_now,
)
from suite.running.interrupts import RunInterrupted
from suite.running.trial import interrupt_signal, run_trial
from suite.specs import Spec, Trial


def default_host_name() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


def new_run_id() -> str:
    """An id for a new run: what `inv baseline` and `inv regress` group a run's records by."""
    return uuid.uuid4().hex[:12]


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA unknown"
    minutes, secs = divmod(int(seconds), 60)
    return f"ETA {minutes}m{secs:02d}s"


def summary_line(record: TrialRecord) -> str:
    if not record.ok:
        error = record.error or ""
        return f"{record.outcome}: {error.splitlines()[0] if error else ''}"
    rate, peak = record.metrics.images_per_sec, record.metrics.peak_memory_bytes
    peak_text = f", peak {peak / 2**20:.0f} MiB" if peak else ""
    jitter = f" (jitter = {rate.jitter:.2f})" if rate.jitter is not None else ""
    return f"ok: images/sec: {rate.mean:.2f} +/- {rate.stderr:.2f}{jitter}{peak_text}"


class TrialExecutor:
    """Runs trials on this host and appends their records; reuses what is already recorded."""

    def __init__(
        self,
        results_dir: Path,
        host: str | None = None,
        force: bool = False,
        echo=print,
        extra_env: dict | None = None,
        run_id: str | None = None,
        place=None,
        host_disk: Path | None = None,
    ):
        """`place`: where trials run other than in a process here, e.g. a Slurm host
        (suite.dispatch.slurm): its run_trial() and describe(results_dir). `host_disk`: the
        directory the host lends every LMS trial's host store (`inv run --host-disk`)."""
        self.place, self.host_disk = place, host_disk
        self.results_dir = Path(results_dir)
        self.host = host or default_host_name()
        self.path = results_file(self.results_dir, self.host)
        self.echo, self.extra_env, self.force = echo, extra_env, force
        self.recorded = {}
        if not force:
            self.recorded = {
                (r.spec_hash, r.repeat): r for r in load_trials(results_dir, self.host)
            }
        self._host_ref = None
        self.elapsed = []  # wall seconds of the trials run (not reused), for ETAs
        self.outcomes = {}  # outcome -> count, of the trials run
        # groups the records of one run (inv regress); given when a run is made of rounds
        self.run_id = run_id or new_run_id()
        self._lock = threading.RLock()  # trials may run in threads (a Slurm host's max_jobs)
        self.stopped = []  # the trials an interruption stopped, described

    def done(self, trial: Trial, repeat: int = 0) -> TrialRecord | None:
        return self.recorded.get((trial.hash, repeat))

    @property
    def host_ref(self) -> str:
        with self._lock:
            if self._host_ref is None:
                description = (
                    self.place.describe(self.results_dir)
                    if self.place
                    else capture_host_description()
                )
                self._host_ref = store_host(self.results_dir, description)
            return self._host_ref

    def mean_trial_s(self) -> float | None:
        return sum(self.elapsed) / len(self.elapsed) if self.elapsed else None

    def run(
        self, trial: Trial, repeat: int = 0, spec: Spec | None = None, tag: dict | None = None
    ) -> TrialRecord:
        """The record of `trial`: the recorded one, or a new one from running it now. `tag`: the
        search ({"search": hash}) or sweep ({"sweep": "switch"}) that runs it."""
        record = self.done(trial, repeat)
        if record is not None:
            return record
        started = utc_now()
        log_path = log_file(self.results_dir, self.host, f"{trial.hash}-{repeat}")
        launch = self.place.run_trial if self.place else run_trial
        try:
            result = launch(trial.params, trial.timeout_s, log_path, self.extra_env, self.host_disk)
        except (RunInterrupted, KeyboardInterrupt) as error:  # no record: a rerun redoes it
            detail = getattr(error, "detail", None)
            with self._lock:
                self.stopped.append(
                    f"trial {trial.describe()} repeat {repeat + 1}/{trial.repeats} "
                    f"[{trial.hash}]" + (f" ({detail})" if detail else "")
                )
            raise
        with self._lock:
            return self._record(trial, repeat, spec, tag, started, log_path, result)

    def stop(self, signal_name: str) -> None:
        """Stop the trials running in other threads (a Slurm host's jobs): each one raises, no
        record. Trials here in the main thread are stopped by the signal itself."""
        if self.place is not None and hasattr(self.place, "stop"):
            self.place.stop(signal_name)

    def interruption(self, error: BaseException) -> RunInterrupted:
        """The one line that says what an interruption stopped and what it kept."""
        name = interrupt_signal(error)
        with self._lock:
            stopped = "; ".join(f"stopped {s}" for s in self.stopped) or "no trial in flight"
            kept = sum(r.run == self.run_id for r in self.recorded.values())
        again = "rerun without --force to resume" if self.force else "rerun to resume"
        return RunInterrupted(
            name,
            f"interrupted by {name}: {stopped}; {kept} record{'' if kept == 1 else 's'} of "
            f"this run kept in {self.path}; {again}",
        )

    def _record(self, trial, repeat, spec, tag, started, log_path, result: TrialResult):
        self.elapsed.append(result.wall_s)
        self.outcomes[result.outcome] = self.outcomes.get(result.outcome, 0) + 1
        record = TrialRecord(
            spec=SpecRef(trial.spec, trial.study, spec.source if spec else None, **(tag or {})),
            spec_hash=trial.hash,
            params=trial.params,
            repeat=repeat,
            host=self.host,
            host_ref=self.host_ref,
            outcome=result.outcome,
            metrics=result.metrics,
            error=result.error,
            device=result.device,
            started_at=started,
            finished_at=utc_now(),
            wall_s=round(result.wall_s, 3),
            log=str(log_path),
            run=self.run_id,
            # the image this trial ran in (inv run --hosts), null when run natively
            image=os.environ.get(IMAGE_DIGEST_VARIABLE),
        )
        append_trial(self.results_dir, record)
        self.recorded[(trial.hash, repeat)] = record
        self.echo(f"    {summary_line(record)} ({result.wall_s:.0f}s)")
        return record
