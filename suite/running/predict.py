"""Predict a limit search's boundary with the LMS simulator, in a child process.

`python -m suite.running.predict REQUEST.json ANSWER.json [--parent PID]`: the request holds the
candidates' trial parameters (ascending) and the mode; the child bisects over them, tracing each
probed size from TensorSpecs (nothing runs, only weights are allocated) and asking lms whether it
fits:
- LMS off: the simulated peak without LMS within the device memory (the trial's memory budget,
  else the GPU's memory);
- LMS on: the auto-tuner (or the given parameters) finds a plan within LMS's budget, and this
  host has the host memory the plan needs (lms.check_host_memory, as before a trial's step).
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


def _fits(params: "TrialParams", mode: str) -> Probe:
    import keras

    import lms
    from suite.errors import SuiteError
    from suite.lms_seam import device_memory, host_memory_fits, lms_options
    from suite.running.planning import plan_trial

    keras.backend.clear_session()
    budget = device_memory(params) or lms.gpu_memory_bytes()
    if budget is None:
        raise SuiteError("no memory budget and no readable GPU: nothing to predict against")
    options = lms_options(params)
    try:
        report = plan_trial(params, None if options else budget)
    except SuiteError:  # not even the closest plan: nothing LMS can do
        return Probe(False, budget)
    # off: the plain peak within the device; on: within LMS's budget (with its safety ratio)
    fits = report["peak_bytes_without_lms"] <= budget if mode == "off" else bool(report["fits"])
    if fits and mode != "off":  # and the host holds what the plan swaps and splits
        fits = host_memory_fits(report, params, emulated=lms.gpu_memory_bytes() is None)
    peaks = report["peak_bytes_without_lms"], report["peak_bytes_with_lms"]
    return Probe(fits, budget, report["budget_bytes"], *peaks)


def predict(candidates: list[dict], mode: str, search_hash: str) -> PredictionRecord:
    started = time.perf_counter()
    probes = {}

    def probe(index: int) -> bool:
        probes[index] = _fits(TrialParams.from_dict(candidates[index]), mode)
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
    answer = predict(request["candidates"], request["mode"], request["search_hash"])
    write_prediction(answer_path, answer)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
