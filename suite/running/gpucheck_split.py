"""The parts of `inv gpucheck`'s check e, each in a process of its own
(suite/running/gpucheck_worker.py runs the one its request names), on the case of
gpucheck_case.py with every Conv2D split in pieces instead of swaps:

- split: one step's loss and variable updates against the plain step's, the pieces' placement,
  and on a GPU the bytes the copy events moved against the plan's;
- pinned: with TF_GPU_HOST_MEM_LIMIT_IN_MB=1 in its environment (read when TensorFlow starts,
  hence a process of its own), the split step must end in lms.HostMemoryError, not a re-plan.

Apart from checks a to d (gpucheck_parts.py): it compares two runs of the step from one state
rather than reading one run's graphs.
"""

import math

from suite.running.gpucheck_case import MECHANISMS, Case, build_case
from suite.running.gpucheck_checks import EXPECT, NO_COPY_EVENTS, not_run
from suite.running.gpucheck_judges import (
    copy_bytes_failures,
    pinned_failures,
    placement_failures,
    update_failures,
)

SPLIT = {"Conv2D": 4}
# Grappler's arithmetic optimizer and remapper rewrite by who reads a tensor (a swap or a piece
# is one more reader), and fused and unfused kernels round differently: off for the plain and
# the split step alike in the update check (tests/lms/conftest.py `exact_arithmetic`)
EXACT_ARITHMETIC = {"arithmetic_optimization": False, "remapping": False}


def split(mode: str) -> dict:
    """Check e: every Conv2D in 4 pieces; one step's loss and updates against the plain step's,
    the pieces' placement, and on a GPU the bytes the copy events moved against the plan's."""
    import tensorflow as tf

    import lms

    tf.config.optimizer.set_experimental_options(EXACT_ARITHMETIC)
    if mode == "gpu":  # GPU only: cuDNN's autotuning and TF32 would differ between the runs
        tf.config.experimental.enable_op_determinism()
        tf.config.experimental.enable_tensor_float_32_execution(False)
    case = build_case(mode)
    plain_loss, plain_updates = step_update(case, case.plain)
    planner = lms.LMS(
        mechanism=MECHANISMS[mode], device_memory=_ample(mode), split=SPLIT, calibration_steps=0
    )
    step = planner.wrap(case.step)
    loss, updates = step_update(case, step)
    report = planner.report
    found = {
        "splits": [dict(s) for s in report.splits or ()],
        "loss": loss,
        "plain_loss": plain_loss,
        "loss_relative": abs(loss - plain_loss) / max(abs(plain_loss), 1e-30),
        "variables": len(updates),
    }
    found["mismatched"], found["largest_relative"] = mismatches(updates, plain_updates, case)
    placement = lms.check_step(step, *case.args)
    failures = update_failures(found) + placement_failures(placement)
    findings = [
        f"{len(found['splits'])} Conv2D split in {SPLIT['Conv2D']} pieces: loss {loss:.7g} vs "
        f"plain {plain_loss:.7g}, {found['variables'] - len(found['mismatched'])} of "
        f"{found['variables']} variables' updates within {EXPECT['update_rtol']:g} "
        f"(largest difference {found['largest_relative']:.2g} relative)",
        placement.summary(),
    ]
    skipped = []
    if mode == "gpu":
        copied = sum(n for _, n, _ in lms.profile_copies(step, *case.args).values())
        planned = planned_copy_bytes(report)
        found.update(copied_bytes=copied, planned_bytes=planned)
        findings.append(
            f"copy events moved {copied / 2**20:.1f} MiB, the plan {planned / 2**20:.1f} MiB"
        )
        failures += copy_bytes_failures(planned, copied)
    else:
        skipped.append(not_run("the bytes the pieces move, from the copy events", NO_COPY_EVENTS))
    found["placement"] = placement.as_dict()
    return {"findings": findings, "failures": failures, "not_run": skipped, "data": found}


def _ample(mode: str) -> str | None:
    """A device memory the split step fits without swaps: the GPU's own; 64 GiB for the two
    logical CPU devices (they have no memory of their own to plan for)."""
    return None if mode == "gpu" else "64GiB"


def planned_copy_bytes(report) -> int:
    """GPU only: what a plan copies between host and device per step: its swaps each way and,
    per split op, its inputs and outputs out and back (desk check S3: about 2 x (I + O))."""
    pieces = sum(2 * s["bytes"] for s in report.splits or ())
    return report.swapped_bytes + report.swapped_in_bytes + pieces


def step_update(case: Case, call) -> tuple[float, list]:
    """The loss and every trainable variable's update of one step from the initial state, on
    the call's second run (its first plans and rewrites): the optimizer's momentum after one
    step is -learning_rate x the gradient it applied, in full precision (tests/support/
    lms_cases.py `step_update`)."""
    import numpy as np

    case.reset()
    call(*case.args)
    case.reset()
    loss = float(call(*case.args))
    return loss, [m.numpy().astype(np.float64) for m in case.optimizer.momentums]


def mismatches(got: list, want: list, case: Case) -> tuple[list, float]:
    """([(variable, relative difference)] of the updates that differ by more than `update_rtol`
    of their own size plus `update_floor` of the whole step's (rounding of near-zero updates),
    the largest relative difference of all)."""
    import numpy as np

    rtol, floor = EXPECT["update_rtol"], EXPECT["update_floor"]
    total = math.sqrt(sum(float(np.sum(w * w)) for w in want))
    names = [v.name for v in case.model.trainable_variables]
    found, largest = [], 0.0
    for name, g, w in zip(names, got, want, strict=True):
        difference, size = float(np.linalg.norm(g - w)), float(np.linalg.norm(w))
        largest = max(largest, difference / max(size, 1e-30))
        if difference > rtol * size + floor * total:
            found.append((name, difference / max(size, 1e-30)))
    return found, largest


def pinned(mode: str) -> dict:
    """Check e, second part (TF_GPU_HOST_MEM_LIMIT_IN_MB=1 in this process's environment): the
    split step, whose host arrays need more than 1 MiB, must end in lms.HostMemoryError on its
    first call, with the closed loop on (as a user runs it), not in a re-plan."""
    import lms

    case = build_case(mode)
    planner = lms.LMS(mechanism=MECHANISMS[mode], device_memory=_ample(mode), split=SPLIT)
    step = planner.wrap(case.step)
    found = {"raised": None, "message": None}
    try:
        step(*case.args)
    except lms.HostMemoryError as error:
        found.update(
            raised="HostMemoryError", message=str(error), need=error.need, cap=error.available
        )
    except Exception as error:  # anything else is what the check reports
        found.update(raised=type(error).__name__, message=str(error).splitlines()[0][:300])
    found["plans"] = step.plans  # made and kept: 0 when the plan was refused before the step
    failures = pinned_failures(found)
    finding = (
        f"pinned host cap 1 MiB: {found['raised'] or 'no error'} on the first call, "
        f"{max(found['plans'] - 1, 0)} re-plans"
    )
    if found["raised"] == "HostMemoryError":
        finding += (
            f" (the plan needs {found['need'] / 2**20:.1f} MiB of host memory, the cap allows "
            f"{found['cap'] / 2**20:.1f} MiB; its message says how to raise it)"
        )
    elif found["message"]:
        finding += f": {found['message'][:150]}"
    return {"findings": [finding], "failures": failures, "data": found}
