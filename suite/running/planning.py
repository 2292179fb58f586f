"""`inv plan`: what LMS would do for a spec's trials, without running a step.

Builds the model at the trial's full size (only its weights are allocated), traces the training
step from TensorSpecs, and asks lms for the analysis, the tuned parameters and the simulated peaks.
Each plan gets its own memory plot, named for its spec, study, size and whether the trial runs
with LMS (`plot_name`): a study's LMS-off and LMS-on trials are two plans and two plots.
"""

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import lms
from suite import lms_seam
from suite.errors import SuiteError
from suite.lms_seam import (
    HOST_NOT_CHECKED,
    SUITE_SPLIT_DEFAULT,
    host_memory_limit,
    lms_options,
)
from suite.records import writable_directory
from suite.specs import Spec, Trial, TrialParams, load_spec
from suite.specs.model import lms_text
from suite.units import size_option


def show_lms_messages() -> None:
    """TFLMSv2's messages (the `lms` logger at INFO) on stderr, as `inv plan` shows them."""
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    logging.getLogger("lms").setLevel(logging.INFO)


class NoPlan(SuiteError):
    """Not even the closest plan (lms.NothingFitsError): nothing LMS can do for the trial.
    `device_bytes`: the device memory it was planned for."""

    def __init__(self, message: str, device_bytes: int):
        super().__init__(message)
        self.device_bytes = device_bytes


@dataclass(frozen=True)
class HostCheck:
    """A plan's host need checked against a host's memory (lms.check_host_memory), as made on a
    plan that does not run."""

    limit: int | str | None  # bytes, "auto" (this host's available memory) or None: not checked
    shortfall: str | None  # why the host cannot hold the plan; None: it can, or not checked

    @property
    def fits(self) -> bool | None:
        """Whether the host holds the plan; None: not checked."""
        return None if self.limit is None else self.shortfall is None

    def to_dict(self) -> dict:
        return {"limit": self.limit, "fits": self.fits, "shortfall": self.shortfall}


@dataclass(frozen=True)
class TrialPlan:
    """A trial's plan, as lms makes it before the trial's first step, and what it was made for:
    the device (`target`, lms's kind: "emulated", "gpu", "two-device"; `device_bytes`, its
    memory) and the host memory it was checked against."""

    params: TrialParams
    plot: Path | None  # its memory plot
    target: str
    device_bytes: int
    report: lms.PlanReport
    host_memory: HostCheck


@dataclass(frozen=True)
class SpecPlan:
    """A spec's trial planned (`inv plan`): its plan, and where a run of the same trial is
    recorded, the closed loop's attempts it measured (lms's `calibration`)."""

    trial: Trial
    plan: TrialPlan
    measured: dict | None = None

    def to_dict(self) -> dict:
        """The JSON `inv plan` prints: the trial planned (its study and its LMS as the spec runs
        it: an LMS-off trial is planned as LMS would do it, auto-tuned, to show what LMS would
        change), the device, lms's report but its timeline (drawn in the plot; hundreds of
        numbers in JSON), the host check and what was measured."""
        plan, params = self.plan, self.plan.params
        report = plan.report.to_dict()
        del report["timeline"]
        planned = {
            "spec_hash": self.trial.hash,
            "study": self.trial.study,
            "trial_lms": lms_text(self.trial.params.lms),
            "workload": params.workload,
            "resolution": params.resolution,
            "batch": params.batch,
            "precision": params.precision,
            "plot": str(plan.plot) if plan.plot else None,
            "target": plan.target,
            "device_bytes": plan.device_bytes,
            **report,
            "host_memory": plan.host_memory.to_dict(),
        }
        return planned | ({"measured": self.measured} if self.measured is not None else {})


def plan_trial(
    params: TrialParams,
    device_memory=None,
    plot: Path | None = None,
    host_memory="auto",
    host_disk=None,
    made: bool = True,
) -> TrialPlan:
    """The plan of a trial, as lms makes it before the trial's first step, without running it.

    device_memory: a GPU's memory (bytes) to plan for, with a GPU's swaps and allocator (another
        host: `inv plan --device-memory`); None: the device the trial runs on here (its spec's
        lms.device_memory or memory budget, else TensorFlow's pool of this host's GPU).
    host_memory: what the plan's host need is checked against (lms.check_host_memory): bytes,
        "auto" (this host's available memory) or None (not checked).
    host_disk: the directory the trial's host lends LMS (emulated device): what the memory
        cannot hold is checked against its free space.
    made: False: a split plan that fits as modelled is reported without being made (lms's
        `plan_only(made=False)`: faster, the model's splits and peaks)."""
    from suite.workloads import build_workload, data, training

    info = params.info
    options = lms_options(params) or {"batch_size": params.batch, "split": SUITE_SPLIT_DEFAULT}
    options["device_memory"] = lms_seam.device_memory(params)
    if device_memory is not None:  # a GPU's memory: plan with a GPU's swaps and allocator
        options["device_memory"] = device_memory
        options.setdefault("mechanism", "device-copy")
    options.pop("host_memory", None)  # checked below against `host_memory`
    try:
        planner = lms.LMS(plot=str(plot) if plot else None, **options)
    except lms.ParameterError as error:
        raise SuiteError(str(error)) from None
    model, loss_fn = build_workload(
        info.name, params.resolution, params.batch, params.precision, params.classes
    )
    step = training.make_train_step(model, loss_fn, training.make_optimizer(), params.precision)
    specs = data.batch_specs(info, params.resolution, params.batch, params.classes)
    try:
        report = planner.plan_only(step, *specs, made=made)
    except lms.NothingFitsError as error:
        raise NoPlan(
            f"{info.name} {params.resolution}px batch {params.batch}: {error}",
            planner.device_bytes,
        ) from None
    target = planner.target
    shortfall = lms_seam.host_memory_shortfall(
        report, host_memory, target.emulated, target.pinned_host_bytes(), host_disk
    )
    check = HostCheck(host_memory, shortfall)
    return TrialPlan(params, plot, target.kind, planner.device_bytes, report, check)


def measured_attempts(results_dir: Path | None) -> dict:
    """Per spec hash, the closed loop's attempts of the newest recorded LMS trial that ran
    (`calibration` of lms's report: budget planned for, simulated and measured peaks)."""
    from suite.records import load_trials

    if results_dir is None or not results_dir.is_dir():
        return {}
    found = {}
    for record in load_trials(results_dir):
        plan = record.metrics.lms_plan if record.metrics else None
        if plan is not None and plan.calibration:
            found[record.spec_hash] = plan.calibration  # records are in the order they ran
    return found


def plot_name(spec: Spec, trial: Trial) -> str:
    """The file of a trial's plan plot, e.g. plan-smoke-googlenet-throughput-googlenet-224px-b4-
    lms-on.png: a study's trials differ in size or LMS mode only, so the name is one per plan."""
    p = trial.params
    mode = "on" if p.lms else "off"
    return f"plan-{spec.name}-{trial.study}-{p.workload}-{p.resolution}px-b{p.batch}-lms-{mode}.png"


def plan_spec(
    spec: Spec,
    output_dir: Path,
    workload: str | None = None,
    device_memory: int | None = None,
    results_dir: Path | None = None,
    host_memory: int | None = None,
) -> list[SpecPlan]:
    """Plans of the trials of `spec` (of one workload if given); plots go to `output_dir`.
    Where `results_dir` holds a run of the same trial, its plan's measured attempts (the
    closed loop) are shown beside the simulation as `measured`.

    With `device_memory` (bytes) the plans are for a GPU of that memory on another host: their
    host need is checked against `host_memory` (bytes), else the spec's lms.host_memory,
    else not at all (one line on stderr says so), never against this machine's free memory.
    Without it they are for this host and checked against what it has available. A plan over
    its host memory is reported (`host_memory`, and a line on stderr), not refused."""
    trials = [t for t in spec.plannable_trials() if workload in (None, t.params.workload)]
    if not trials:
        choices = sorted({t.params.workload for t in spec.plannable_trials()})
        raise SuiteError(
            f"spec {spec.name} has no trial of workload {workload!r}; it has: {', '.join(choices)}"
        )
    here = device_memory is None
    limits = [host_memory_limit(t.params, host_memory, here) for t in trials]
    if any(limit is None for limit in limits):
        print(HOST_NOT_CHECKED, file=sys.stderr)
    output_dir.mkdir(parents=True, exist_ok=True)
    measured = measured_attempts(results_dir) if here else {}
    plans = []
    for trial, limit in zip(trials, limits, strict=True):
        plot = output_dir / plot_name(spec, trial)
        try:
            plan = plan_trial(trial.params, device_memory, plot, limit)
        except SuiteError as error:
            if isinstance(error, NoPlan) or not here:
                raise
            hint = "give --device-memory, e.g. --device-memory 16GiB"
            raise SuiteError(f"{error} ({hint})") from None
        if plan.host_memory.shortfall:
            print(f"{trial.study}: {plan.host_memory.shortfall}", file=sys.stderr)
        plans.append(SpecPlan(trial, plan, measured.get(trial.hash)))
    return plans


def plan_command(
    spec: str,
    overrides: dict,
    output_dir: Path,
    workload: str | None = None,
    device_memory: str | None = None,
    host_memory: str | None = None,
    results_dir: Path | None = None,
) -> str:
    """`inv plan`: the plans of `spec` (a name or a path; `overrides` as `inv run` takes them) as
    the JSON it prints (its stdout; progress and lms's messages go to stderr). Checked first,
    before any work: the sizes (text, e.g. "16GiB": parsed here, once), the spec, the output."""
    device_memory = size_option("--device-memory", device_memory)
    host_memory = size_option("--host-memory", host_memory)
    loaded = load_spec(spec, overrides)
    output_dir = writable_directory(output_dir, "--output")
    show_lms_messages()
    plans = plan_spec(loaded, output_dir, workload, device_memory, results_dir, host_memory)
    return json.dumps([plan.to_dict() for plan in plans], indent=1)
