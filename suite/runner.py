"""Run a spec's trials on this host, natively: resume, progress, one record per trial."""

import socket
from dataclasses import dataclass, field
from pathlib import Path

from suite.hostinfo import capture_host_description
from suite.records import (
    SCHEMA_VERSION,
    append_record,
    load_records,
    results_file,
    store_host,
    utc_now,
)
from suite.specs import Spec
from suite.trial import run_trial


def default_host_name() -> str:
    return socket.gethostname().split(".")[0] or "localhost"


@dataclass
class RunSummary:
    results: Path
    planned: int
    skipped: int
    outcomes: dict = field(default_factory=dict)


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA unknown"
    minutes, secs = divmod(int(seconds), 60)
    return f"ETA {minutes}m{secs:02d}s"


def _summary_line(result) -> str:
    if result.outcome != "ok":
        first = (result.error or "").splitlines()[0] if result.error else ""
        return f"{result.outcome}: {first}"
    m = result.metrics
    rate = m["images_per_sec"]
    peak = m.get("peak_memory_bytes")
    peak_text = f", peak {peak / 2**20:.0f} MiB" if peak else ""
    return (
        f"ok: images/sec: {rate['mean']:.2f} +/- {rate['stderr']:.2f} "
        f"(jitter = {rate['jitter']:.2f}){peak_text}"
    )


def run_spec(
    spec: Spec,
    results_dir: Path,
    host: str | None = None,
    force: bool = False,
    echo=print,
    extra_env: dict | None = None,
) -> RunSummary:
    """Run every runnable trial of `spec` not yet recorded for `host` (all of them if `force`)."""
    host = host or default_host_name()
    path = results_file(results_dir, host)
    done = set() if force else {(r["spec_hash"], r["repeat"]) for r in load_records(path)}
    planned = [(trial, repeat) for trial in spec.trials for repeat in range(trial.repeats)]
    todo = [(t, r) for t, r in planned if (t.hash, r) not in done]
    summary = RunSummary(path, len(planned), len(planned) - len(todo))
    echo(
        f"spec {spec.name}: {len(planned)} trials; {summary.skipped} already recorded in "
        f"{path}; {len(todo)} to run"
    )
    for search in spec.searches:
        echo(f"  study {search.study} is a {search.kind} search: declared, not run by `inv run`")
    if not todo:
        return summary
    host_ref = store_host(results_dir, capture_host_description())
    elapsed = []
    for index, (trial, repeat) in enumerate(todo, start=1):
        remaining = sum(elapsed) / len(elapsed) * (len(todo) - index + 1) if elapsed else None
        echo(
            f"[trial {index}/{len(todo)}] {trial.describe()} repeat {repeat + 1}/"
            f"{trial.repeats} [{trial.hash}] {_eta(remaining)}"
        )
        started = utc_now()
        log_path = Path(results_dir) / "logs" / host / f"{trial.hash}-{repeat}.log"
        result = run_trial(trial.params, trial.timeout_s, log_path, extra_env)
        elapsed.append(result.wall_s)
        append_record(
            path,
            {
                "schema": SCHEMA_VERSION,
                "spec": {"name": spec.name, "study": trial.study, "source": spec.source},
                "spec_hash": trial.hash,
                "params": trial.params,
                "repeat": repeat,
                "host": host,
                "host_ref": host_ref,
                "outcome": result.outcome,
                "metrics": result.metrics,
                "error": result.error,
                "device": result.device,
                "started_at": started,
                "finished_at": utc_now(),
                "wall_s": round(result.wall_s, 3),
                "log": str(log_path),
            },
        )
        summary.outcomes[result.outcome] = summary.outcomes.get(result.outcome, 0) + 1
        echo(f"    {_summary_line(result)} ({result.wall_s:.0f}s)")
    return summary


__all__ = ["run_spec", "default_host_name", "RunSummary"]
