"""The history's limits: each limit search's result (the largest size that trained, LMS off or
on) placed at the run it belongs to. A search record has no run id: it belongs to the run of the
trials it ran (tagged with its hash, finished within the search), one whose trials were all
reused to the newest run of its host begun before it, else to a day of its own."""

from dataclasses import dataclass

from suite.records import SearchRecord, TrialRecord
from suite.specs.model import lms_text


@dataclass(frozen=True)
class Limit:
    """A limit search's result at one run: the largest size that trained."""

    run: str
    started_at: str
    host: str
    host_ref: str
    workload: str
    kind: str  # max-resolution, max-batch
    mode: str  # off, on
    lms: str
    largest_ok: int | None
    stop_reached: bool  # the search's range ended before a failure: at least largest_ok
    verdict: str | None  # the boundary's (clear, confirmed, uncertain); None: before it

    @property
    def text(self) -> str:
        if self.largest_ok is None:
            return "none"
        return f"≥{self.largest_ok}" if self.stop_reached else str(self.largest_ok)


def search_run(
    search: SearchRecord, runs: dict[str, list[TrialRecord]], started: dict[str, str]
) -> str:
    """The run a search belongs to (the module docstring says how)."""
    for key, records in runs.items():
        if any(
            r.spec.search == search.search_hash
            and r.host == search.host
            and search.started_at <= r.finished_at <= search.finished_at
            for r in records
        ):
            return key
    earlier = [
        k
        for k, records in runs.items()
        if started[k] <= search.started_at and any(r.host == search.host for r in records)
    ]
    if earlier:
        return max(earlier, key=started.__getitem__)
    return f"day:{search.host}:{search.started_at[:10]}"


def limits_per_run(searches: list[SearchRecord], runs, started) -> list[Limit]:
    limits = []
    for s in searches:
        key = search_run(s, runs, started)
        limits.append(
            Limit(
                key,
                started.get(key, s.started_at),
                s.host,
                s.host_ref,
                s.params.workload,
                s.kind,
                s.mode,
                lms_text(s.lms),
                s.largest_ok,
                s.stop_reached,
                s.boundary.verdict if s.boundary else None,
            )
        )
    return sorted(limits, key=lambda x: (x.workload, x.host, x.kind, x.mode, x.started_at))
