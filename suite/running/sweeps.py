"""Switch sweeps (seed 000): resolutions in ascending order, LMS off while the model trains
without it, LMS on from the first resolution where it does not.

The switch point is where the LMS-off trial did not end `ok` (out of memory, or a crash or time-out
at a size that trained before: all mean "does not train without LMS here"); that resolution and
every larger one run with LMS on. Trials are reused from the records, so a resumed sweep makes the
same decisions without re-running anything.
"""

from suite.running.executor import TrialExecutor, format_eta
from suite.specs import Spec, SwitchSweep


def run_switch_sweep(sweep: SwitchSweep, spec: Spec, executor: TrialExecutor) -> int | None:
    """Run the sweep; return the resolution where LMS became necessary (None: it never did)."""
    echo, tag = executor.echo, {"sweep": "switch"}
    switched_at = None
    total = len(sweep.resolutions)
    echo(f"sweep {sweep.study}: {total} resolutions, LMS off until the model stops fitting")
    for index, resolution in enumerate(sweep.resolutions, start=1):
        mode = "on" if switched_at is not None else "off"
        for repeat in range(sweep.repeats):
            trial = sweep.trial(resolution, mode)
            mean = executor.mean_trial_s()
            left = (total - index + 1) * sweep.repeats - repeat
            eta = format_eta(mean * left if mean else None)
            reused = executor.done(trial, repeat) is not None
            echo(
                f"[sweep {sweep.study} {index}/{total}] {resolution}px LMS {mode} repeat "
                f"{repeat + 1}/{sweep.repeats} [{trial.hash}] "
                f"{'recorded' if reused else eta}"
            )
            record = executor.run(trial, repeat, spec, tag)
            if mode == "off" and not record.ok:
                switched_at = resolution
                echo(f"    LMS becomes necessary at {resolution}px: running it with LMS on")
                mode = "on"
                executor.run(sweep.trial(resolution, mode), repeat, spec, tag)
    return switched_at
