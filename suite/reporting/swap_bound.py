"""The swap-only bound of a limit search: how far swapping alone could take the LMS gain, and
the operation that sets it.

Swapping moves tensors to host memory between their uses, but an op runs with all its inputs and
outputs on the device, and its kernel's temporary (a convolution's workspace, Eigen's col
buffer), beside the variables (weights, optimizer slots) and the step's inputs. No swap plan
brings a step's device peak below

    floor = the op's footprint + variables + the step's inputs

for the op whose footprint is largest, as the LMS report's analysis counts it
(`analysis.floor_op`: the distinct buffers it reads and writes, an output written into an input
of its size counted once, plus its temporary; records from before it was recorded:
`analysis.largest_op`, inputs + outputs). The footprint and the inputs grow with the searched
dimension's elements (pixels or voxels, resolution ** spatial_dims, for a resolution search;
samples for a batch search), the variables do not. From an LMS-on trial of E1 elements, the
floor reaches the device memory LMS was given (its closed loop's `device_limit_bytes`: the
device less the reserve, not the budget the safety ratio leaves, since how close to the device
LMS dares plan is part of its reach; reports without the loop: `budget_bytes`) at about

    E* = E1 × (device_limit_bytes − variable_bytes) / (footprint bytes + input_bytes)

elements. The trial is the one at the LMS-on limit, else the largest LMS-on trial with an LMS
report (from the host's trial records, by spec hash). The bound is E* over the LMS-off limit's
elements, the unit of the gain, and E* in the searched unit (resolution: E* ** (1/spatial_dims)).

An estimate, linear from one size: at E* another op may set the floor, an Eigen col buffer does
not grow with the pixels (its shards do), and labels are scaled with the pixels whether they grow
with them or not. It counts bytes asked, not the allocator's chunks: what the allocator pads and
fragments is part of the distance between a measured limit and this bound.
"""

from dataclasses import dataclass

from suite.records import SearchRecord, SearchTrial, TrialRecord
from suite.reporting.lms_view import Plan, plan

DASH = "—"


@dataclass(frozen=True)
class SwapBound:
    elements: float  # E*: pixels/voxels (resolution search) or samples (batch search)
    size: float  # E* in the searched unit: a resolution or a batch
    op: str  # the TensorFlow name of the largest op


def lms_reports(trial_records: list[TrialRecord]) -> dict[tuple[str, str], Plan]:
    """(host, spec hash) -> the LMS report of a trial record that carries a usable one."""
    reports = {}
    for record in trial_records:
        report = plan(record.metrics)
        if _usable(report):
            reports[(record.host, record.spec_hash)] = report
    return reports


def _usable(report: Plan | None) -> bool:
    """Whether a report has what the bound needs (older records' reports may not)."""
    return report is not None and None not in (
        report.budget_bytes,
        report.variable_bytes,
        report.input_bytes,
        report.floor_op,
    )


def _dims(search: SearchRecord) -> int:
    """The power that turns the searched value into elements: spatial dims, or 1 for a batch."""
    return search.params.info.spatial_dims if search.searched == "resolution" else 1


def _trial_report(on: SearchRecord, reports: dict) -> tuple[SearchTrial, Plan] | tuple[None, None]:
    """The LMS-on trial the bound is estimated from, and its LMS report."""
    at_limit = [t for t in on.trials if t.value == on.largest_ok and t.outcome == "ok"]
    others = sorted(on.trials, key=lambda t: t.value, reverse=True)
    for trial in at_limit + others:
        found = reports.get((on.host, trial.spec_hash))
        if found is not None and trial.value:
            return trial, found
    return None, None


def swap_bound(on: SearchRecord, reports: dict) -> SwapBound | None:
    """The swap-only bound of an LMS-on search, or None without a trial that says it."""
    trial, report = _trial_report(on, reports)
    if trial is None:
        return None
    growing = report.floor_op.bytes + report.input_bytes
    room = report.device_limit_bytes - report.variable_bytes
    if growing <= 0 or room <= 0:
        return None
    dims = _dims(on)
    elements = trial.value**dims * room / growing
    return SwapBound(elements, elements ** (1 / dims), report.floor_op.name)


def short_op_name(name: str) -> str:
    """ "gradient_tape/googlenet_1/conv1_1/ReluGrad" -> "conv1_1/ReluGrad": without the gradient
    tape's and the outermost (model's) scope, at most the last three parts."""
    parts = [part for part in name.split("/") if part != "gradient_tape"]
    if len(parts) > 2:
        parts = parts[1:]
    return "/".join(parts[-3:])


def bound_text(off: SearchRecord | None, on: SearchRecord | None, reports: dict) -> str:
    """ "≈ 7.68× (443), set by conv1_1/ReluGrad": the bound in the gain's unit (and in the searched
    unit); without an LMS-off limit only the latter; "—" where there is no gain to set it beside."""
    if not off or not on or on.largest_ok is None:
        return DASH
    bound = swap_bound(on, reports)
    if bound is None:
        return DASH
    where = f"set by {short_op_name(bound.op)}"
    if off.largest_ok is None:
        return f"≈ {bound.size:.0f}, {where}"
    ratio = bound.elements / off.largest_ok ** _dims(on)
    return f"≈ {ratio:.2f}× ({bound.size:.0f}), {where}"
