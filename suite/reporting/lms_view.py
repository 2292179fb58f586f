"""What the report shows of lms's plan report and swap traffic (`Metrics.lms_plan`, an
lms.PlanReport; `Metrics.lms_traffic`, an lms.SwapTraffic), and of the emulated link of a trial's
`lms` table (`TrialParams.lms`). A field an older lms did not write, or a hand-written record's
value of another type, reads as None: the report says "—" for what it cannot show rather than
stop."""

from dataclasses import dataclass

import lms


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


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


def _floor_op(analysis) -> "lms.FloorOp | lms.OpBytes | None":
    op = (analysis.floor_op or analysis.largest_op) if analysis is not None else None
    if op is None or not isinstance(op.name, str) or not op.name or not _is_number(op.bytes):
        return None
    return op


def _numbers(values) -> tuple[float, ...] | None:
    if values is None or not all(map(_is_number, values)):
        return None
    return tuple(values)


def _timeline(timeline) -> "lms.Timeline | None":
    """lms's timeline with a series of anything but numbers as None (a hand-written record)."""
    without = _numbers(timeline.device_bytes_without_lms) if timeline is not None else None
    if not without:
        return None
    return lms.Timeline(
        without, _numbers(timeline.device_bytes_with_lms), _numbers(timeline.host_bytes)
    )


def _number(value) -> float | None:
    return value if _is_number(value) else None


def plan(metrics) -> Plan | None:
    """The LMS plan report of a trial's metrics (None: no LMS, or a record before it)."""
    report = metrics.lms_plan if metrics is not None else None
    if report is None:
        return None
    analysis = report.analysis
    budget = _number(report.budget_bytes)
    calibration = report.calibration if isinstance(report.calibration, dict) else {}
    return Plan(
        budget_bytes=budget,
        device_limit_bytes=_number(calibration.get("device_limit_bytes")) or budget,
        variable_bytes=_number(analysis.variable_bytes) if analysis else None,
        input_bytes=_number(analysis.input_bytes) if analysis else None,
        floor_op=_floor_op(analysis),
        timeline=_timeline(report.timeline),
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


def _direction(traffic, way: str) -> Direction | None:
    moved = _number(getattr(traffic, f"{way}_bytes_per_step"))
    swaps = _number(getattr(traffic, f"swap_{way}s_per_step"))
    if moved is None or swaps is None:
        return None
    seconds = _number(getattr(traffic, f"{way}_seconds_per_step"))
    return Direction(moved, swaps, seconds, _number(getattr(traffic, f"{way}_bandwidth")))


def traffic(metrics) -> Traffic | None:
    """The swap traffic of a trial's metrics; None without one (or one this cannot read)."""
    table = metrics.lms_traffic if metrics is not None else None
    if table is None:
        return None
    out, into = _direction(table, "out"), _direction(table, "in")
    if out is None or into is None:
        return None
    return Traffic(table.copy if table.version >= 2 else None, out, into)


def link_bandwidth(params) -> float | None:
    """The host-to-device bandwidth (bytes/s) of a trial's emulated link; None without one."""
    link = (params.lms or {}).get("link")
    return _number(link.get("bandwidth")) if isinstance(link, dict) else None
