"""A resumed run is the same run: the rerun of an interrupted spec continues its run id.

`inv baseline` and `inv regress` take a spec's newest *run* (records sharing `run`), so a run
interrupted after two of three processes per configuration and resumed for the third must not
count as two runs. The runner leaves a marker naming the run while it is unfinished,
`results/unfinished/<host>/<key>.json`, and removes it when the run completes; a rerun of the same
spec on the same host in the same results directory finds it and continues that run.

Why a marker and not the records alone: records say which trials ran, not whether the run that
made them stopped early. A spec sharing trials with another one already recorded, or rerun after
it completed, starts a new run. `key` is of what the run runs (trial hashes and repeats, sweeps,
searches), so a spec edited since, other overrides or other `--study` choices are another run.
"""

import json
from pathlib import Path

from suite.errors import SuiteError
from suite.records import check_host_name, utc_now, write_atomic
from suite.running.executor import new_run_id
from suite.specs import Spec
from suite.specs.model import trial_hash


def spec_key(spec: Spec) -> str:
    """What `spec` runs, hashed: trials with their repeats, switch sweeps, limit searches."""
    return trial_hash(
        {
            "trials": sorted(f"{t.hash}x{t.repeats}" for t in spec.trials),
            "sweeps": sorted(
                f"{s.trial(r, mode).hash}x{s.repeats}"
                for s in spec.switch_sweeps
                for r in s.resolutions
                for mode in ("off", "on")
            ),
            "searches": sorted(s.hash(mode) for s in spec.searches for mode in s.modes),
        }
    )


class UnfinishedRun:
    """The marker of `spec`'s run on `host` in `results_dir` while that run has not completed."""

    def __init__(self, results_dir: Path, host: str, spec: Spec):
        self.spec = spec
        folder = Path(results_dir) / "unfinished" / check_host_name(host)
        self.path = folder / f"{spec_key(spec)}.json"

    def run_id(self) -> str | None:
        """The run to continue, or None when there is none."""
        if not self.path.exists():
            return None
        try:
            run = json.loads(self.path.read_text()).get("run")
        except (json.JSONDecodeError, AttributeError):
            run = None
        if not isinstance(run, str) or not run:
            raise SuiteError(
                f"{self.path}: field 'run' must name the unfinished run (a run id string); "
                "delete the file to start a new run"
            )
        return run

    def begin(self, fresh: bool = False) -> tuple[str, bool]:
        """(run id, whether it is resumed): the unfinished run's, or a new one marked unfinished
        before its first trial (so that a SIGKILL leaves the marker). `fresh` (`--force`): a new
        run whatever is marked."""
        run = None if fresh else self.run_id()
        if run is not None:
            return run, True
        run = new_run_id()
        marker = {
            "run": run,
            "spec": self.spec.name,
            "source": self.spec.source,
            "started_at": utc_now(),
        }
        write_atomic(self.path, json.dumps(marker, indent=1))
        return run, False

    def finish(self) -> None:
        """The run completed: a rerun starts a new one."""
        self.path.unlink(missing_ok=True)
