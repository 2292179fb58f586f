"""Predict a limit search's boundary with the LMS simulator, in a child process.

`python -m suite.running.predict REQUEST.json ANSWER.json [--parent PID]`: the request holds the
candidates' trial parameters (ascending) and the mode; the child bisects over them, tracing each
probed size from TensorSpecs (nothing runs, only weights are allocated) and asking lms whether it
fits:
- LMS off: the simulated peak without LMS within the device memory (the spec's lms.device_memory
  or the trial's memory budget, else TensorFlow's memory pool of this host's GPU, which lms reads:
  not NVML's total);
- LMS on: the auto-tuner (or the given parameters) finds a plan within LMS's budget, and this
  host has the host memory the plan needs (lms.check_host_memory, as before a trial's step;
  with the disk the search's trials are lent, `inv search --host-disk`, its free space too).
A child process because tracing many sizes grows the process, and the parent stays TensorFlow-free.
With `--parent`, it ends itself (and removes the request's directory) when that process is gone.
"""

import json
import sys
import time
from pathlib import Path

from suite.records import PredictionRecord, Probe, write_prediction
from suite.running.bracket import bracket_search
from suite.running.orphan_guard import child_arguments
from suite.specs.model import TrialParams


def _fits(params: "TrialParams", mode: str, disk: str | None = None) -> Probe:
    import keras

    from suite.errors import SuiteError
    from suite.lms_seam import host_memory_limit
    from suite.running.planning import NoPlan, plan_trial

    keras.backend.clear_session()
    # planned as the trial will run here (its device memory, else TensorFlow's pool of this
    # host's GPU; the emulated device without a GPU) and checked against this host's memory,
    # where its trials run (or the spec's lms.host_memory)
    limit = host_memory_limit(params, None, here=True) if mode != "off" else None
    try:  # split plans as modelled, not made: a prediction, which the trials confirm
        plan = plan_trial(params, host_memory=limit, host_disk=disk, made=False)
    except NoPlan as error:  # not even the closest plan: nothing LMS can do
        return Probe(False, error.device_bytes)
    except SuiteError as error:  # no device memory to plan for
        raise SuiteError(f"nothing to predict against: {error}") from None
    report, budget = plan.report, plan.device_bytes
    # off: the plain peak within the device; on: within LMS's budget (with its safety ratio)
    fits = report.peak_bytes_without_lms <= budget if mode == "off" else bool(report.fits)
    if fits and mode != "off":  # and the host holds what the plan swaps and splits
        fits = plan.host_memory.fits is not False
    peaks = report.peak_bytes_without_lms, report.peak_bytes_with_lms
    return Probe(fits, budget, report.budget_bytes, *peaks)


def predict(
    candidates: list[dict], mode: str, search_hash: str, disk: str | None = None
) -> PredictionRecord:
    started = time.perf_counter()
    probes = {}

    def probe(index: int) -> bool:
        probes[index] = _fits(TrialParams.from_dict(candidates[index]), mode, disk)
        return probes[index].fits

    bracket = bracket_search(len(candidates), probe, predicted=len(candidates) // 4)
    seconds = round(time.perf_counter() - started, 2)
    return PredictionRecord(search_hash, bracket.passed, dict(sorted(probes.items())), seconds)


def main(argv: list[str]) -> int:
    # with --parent, a SIGKILLed search leaves no orphan tracing for minutes
    request_path, answer_path = child_arguments(
        argv, "python -m suite.running.predict", "request_path", "answer_path"
    )
    request = json.loads(Path(request_path).read_text())
    answer = predict(
        request["candidates"], request["mode"], request["search_hash"], request.get("disk")
    )
    write_prediction(answer_path, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
