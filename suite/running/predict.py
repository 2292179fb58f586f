"""Predict a limit search's boundary with the LMS simulator, in a child process.

`python -m suite.running.predict REQUEST.json ANSWER.json [--parent PID]`: the request holds the
candidates' trial parameters (ascending) and the mode; the child bisects over them, tracing each
probed size from TensorSpecs (nothing runs, only weights are allocated) and asking lms whether it
fits:
- LMS off: the simulated peak without LMS within the device memory (the trial's memory budget,
  else the GPU's memory);
- LMS on: the auto-tuner (or the given parameters) finds a plan within LMS's budget.
A child process because tracing many sizes grows the process, and the parent stays TensorFlow-free.
With `--parent`, it ends itself (and removes the request's directory) when that process is gone.
"""

import json
import sys
import time
from pathlib import Path

from suite.records import write_atomic
from suite.running.bracket import bracket_search
from suite.running.orphan_guard import child_arguments
from suite.specs.model import TrialParams


def _fits(params: "TrialParams", mode: str) -> dict:
    import keras

    import lms
    from suite.errors import SuiteError
    from suite.lms_seam import device_memory, lms_options
    from suite.running.planning import plan_trial

    keras.backend.clear_session()
    budget = device_memory(params) or lms.gpu_memory_bytes()
    if budget is None:
        raise SuiteError("no memory budget and no readable GPU: nothing to predict against")
    options = lms_options(params)
    try:
        report = plan_trial(params, None if options else budget)
    except SuiteError:  # not even the closest plan: nothing LMS can do
        return {"fits": False, "budget_bytes": budget}
    # off: the plain peak within the device; on: within LMS's budget (with its safety ratio)
    fits = report["peak_bytes_without_lms"] <= budget if mode == "off" else bool(report["fits"])
    return {
        "fits": fits,
        "budget_bytes": budget,
        "lms_budget_bytes": report["budget_bytes"],
        "peak_bytes_without_lms": report["peak_bytes_without_lms"],
        "peak_bytes_with_lms": report["peak_bytes_with_lms"],
    }


def predict(candidates: list[dict], mode: str) -> dict:
    started = time.perf_counter()
    probes = {}

    def probe(index: int) -> bool:
        probes[index] = _fits(TrialParams.from_dict(candidates[index]), mode)
        return probes[index]["fits"]

    bracket = bracket_search(len(candidates), probe, predicted=len(candidates) // 4)
    return {
        "largest_fit": bracket.passed,
        "probes": {str(i): p for i, p in sorted(probes.items())},
        "seconds": round(time.perf_counter() - started, 2),
    }


def main(argv: list[str]) -> int:
    # with --parent, a SIGKILLed search leaves no orphan tracing for minutes
    request_path, answer_path = child_arguments(
        argv, "python -m suite.running.predict", "request_path", "answer_path"
    )
    request = json.loads(Path(request_path).read_text())
    answer = predict(request["candidates"], request["mode"])
    write_atomic(answer_path, json.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
