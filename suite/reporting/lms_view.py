"""lms's plan report and swap traffic as the report reads them. A trial record keeps both as lms
gave them (`Metrics.lms_plan`, `Metrics.lms_traffic`: tables lms writes, not the suite); this
module is the one place that reads their keys, so that when lms exports them as types only it
changes; likewise the emulated link of a trial's `lms` table (`TrialParams.lms`). A field an
older lms did not write, or one of another type, reads as None: the report says "—" for what it
cannot show rather than stop."""

from dataclasses import dataclass


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _number(table, key: str) -> float | None:
    """`table[key]` if `table` is a table and that is a number; None otherwise."""
    value = table.get(key) if isinstance(table, dict) else None
    return value if _is_number(value) else None


def _numbers(table, key: str) -> tuple[float, ...] | None:
    values = table.get(key) if isinstance(table, dict) else None
    if not isinstance(values, list) or not all(map(_is_number, values)):
        return None
    return tuple(values)


@dataclass(frozen=True)
class FloorOp:
    """The op whose footprint sets the floor no swap plan goes below (`analysis.floor_op`, with
    its kernel's temporary; reports before it: TFLMSv2's `largest_op`, inputs + outputs)."""

    name: str
    bytes: float


@dataclass(frozen=True)
class Timeline:
    """The simulated device and host memory over one step, pooled (bytes)."""

    device_without_lms: tuple[float, ...]
    device_with_lms: tuple[float, ...] | None
    host: tuple[float, ...] | None


@dataclass(frozen=True)
class Plan:
    """What the report reads of an LMS plan report."""

    budget_bytes: float | None
    device_limit_bytes: float | None  # the closed loop's limit, else the budget
    variable_bytes: float | None
    input_bytes: float | None
    floor_op: FloorOp | None
    timeline: Timeline | None


def _floor_op(analysis) -> FloorOp | None:
    op = (analysis.get("floor_op") or analysis.get("largest_op")) if analysis else None
    name, size = (op.get("name"), _number(op, "bytes")) if isinstance(op, dict) else (None, None)
    return FloorOp(name, size) if isinstance(name, str) and name and size is not None else None


def _timeline(table) -> Timeline | None:
    without = _numbers(table, "device_bytes_without_lms")
    if not without:
        return None
    return Timeline(
        without, _numbers(table, "device_bytes_with_lms"), _numbers(table, "host_bytes")
    )


def plan(metrics) -> Plan | None:
    """The LMS plan report of a trial's metrics (None: no LMS, or a record before it)."""
    report = metrics.lms_plan if metrics is not None else None
    if not isinstance(report, dict):
        return None
    analysis = report.get("analysis") if isinstance(report.get("analysis"), dict) else {}
    budget = _number(report, "budget_bytes")
    return Plan(
        budget_bytes=budget,
        device_limit_bytes=_number(report.get("calibration"), "device_limit_bytes") or budget,
        variable_bytes=_number(analysis, "variable_bytes"),
        input_bytes=_number(analysis, "input_bytes"),
        floor_op=_floor_op(analysis),
        timeline=_timeline(report.get("timeline")),
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


def _direction(table: dict, way: str) -> Direction | None:
    moved, swaps = _number(table, f"{way}_bytes_per_step"), _number(table, f"swap_{way}s_per_step")
    if moved is None or swaps is None:
        return None
    seconds = _number(table, f"{way}_seconds_per_step")
    return Direction(moved, swaps, seconds, _number(table, f"{way}_bandwidth"))


def traffic(metrics) -> Traffic | None:
    """The swap traffic of a trial's metrics; None without one (or one this cannot read)."""
    table = metrics.lms_traffic if metrics is not None else None
    if not table or not isinstance(table, dict):
        return None
    out, into = _direction(table, "out"), _direction(table, "in")
    if out is None or into is None:
        return None
    version = _number(table, "version") or 1
    copy = table.get("copy") if version >= 2 else None
    return Traffic(copy, out, into)


def link_bandwidth(params) -> float | None:
    """The host-to-device bandwidth (bytes/s) of a trial's emulated link; None without one."""
    link = (params.lms or {}).get("link")
    return _number(link, "bandwidth")
