"""What the report shows of lms's plan report and swap traffic (`Metrics.lms_plan`, an
lms.PlanReport; `Metrics.lms_traffic`, an lms.SwapTraffic), and of the emulated link of a trial's
`lms` table (`TrialParams.lms`). Their types are checked where the record is read
(suite/records/metrics.py): what is here reads them as their types say. A field an older lms did
not write reads as None, and the report says "—" for what it cannot show rather than stop. The
two numbers checked here come from tables no type describes: the closed loop's `calibration` and
the trial's `lms` table."""

from dataclasses import dataclass

import lms


def _number(value) -> float | None:
    """`value` from an untyped table if it is a number, else None."""
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Plan:
    """What the report reads of an LMS plan report."""

    budget_bytes: float | None
    device_limit_bytes: float | None  # the closed loop's limit, else the budget
    variable_bytes: float | None
    input_bytes: float | None
    # the op whose footprint sets the floor no swap plan goes below (lms.FloorOp; reports
    # before it: TFLMSv2's largest op, an lms.OpBytes of its inputs + outputs)
    floor_op: lms.FloorOp | lms.OpBytes | None
    timeline: lms.Timeline | None  # simulated device and host memory over one step, pooled


def plan(metrics) -> Plan | None:
    """The LMS plan report of a trial's metrics (None: no LMS, or a record before it)."""
    report = metrics.lms_plan if metrics is not None else None
    if report is None:
        return None
    analysis, timeline = report.analysis, report.timeline
    limit = _number((report.calibration or {}).get("device_limit_bytes"))
    return Plan(
        budget_bytes=report.budget_bytes,
        device_limit_bytes=limit or report.budget_bytes,
        variable_bytes=analysis.variable_bytes if analysis else None,
        input_bytes=analysis.input_bytes if analysis else None,
        floor_op=(analysis.floor_op or analysis.largest_op) if analysis else None,
        timeline=timeline if timeline and timeline.device_bytes_without_lms else None,
    )


@dataclass(frozen=True)
class Direction:
    """Swap traffic one way (out: device to host), per step."""

    bytes: float
    swaps: float
    seconds: float | None
    bandwidth: float | None  # bytes/s, None where nothing was timed


@dataclass(frozen=True)
class Traffic:
    """A trial's swap traffic per step (lms.LMSFunction.traffic())."""

    copy: str | None  # how the seconds were measured; None: a record before traffic version 2
    out: Direction
    into: Direction


def traffic(metrics) -> Traffic | None:
    """The swap traffic of a trial's metrics; None without one."""
    t = metrics.lms_traffic if metrics is not None else None
    if t is None:
        return None
    out = Direction(
        t.out_bytes_per_step, t.swap_outs_per_step, t.out_seconds_per_step, t.out_bandwidth
    )
    into = Direction(
        t.in_bytes_per_step, t.swap_ins_per_step, t.in_seconds_per_step, t.in_bandwidth
    )
    return Traffic(t.copy if t.version >= 2 else None, out, into)


def link_bandwidth(params) -> float | None:
    """The host-to-device bandwidth (bytes/s) of a trial's emulated link; None without one."""
    link = (params.lms or {}).get("link")
    return _number(link.get("bandwidth")) if isinstance(link, dict) else None
