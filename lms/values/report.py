"""What crosses from `lms` into a program that records it: the plan's report (`PlanReport`), the
swap traffic per step (`SwapTraffic`) and the host store's disk (`DiskUsage`), as frozen types.
`to_dict()` gives the JSON a record holds; `from_dict()` reads it back, also the older forms
stored records hold (keys added since load as None). No TensorFlow here: reading a record stays
light."""

import dataclasses
from dataclasses import dataclass


def _tuple(values) -> tuple | None:
    return None if values is None else tuple(values)


def _list(values) -> list | None:
    return None if values is None else list(values)


@dataclass(frozen=True)
class OpBytes:
    """An op and bytes it accounts for (the largest op's inputs and outputs; a loop's lists)."""

    name: str
    bytes: int

    def to_dict(self) -> dict:
        return {"name": self.name, "bytes": self.bytes}

    @classmethod
    def from_dict(cls, data: dict) -> "OpBytes":
        return cls(data["name"], data["bytes"])


@dataclass(frozen=True)
class FloorOp:
    """The op that sets the swap-only floor (`lms.memory.lifetimes.largest_footprint`)."""

    name: str
    bytes: int  # its inputs' and outputs' buffers and its kernel temporary
    temporary_bytes: int  # of which the kernel's temporary

    def to_dict(self) -> dict:
        return {"name": self.name, "bytes": self.bytes, "temporary_bytes": self.temporary_bytes}

    @classmethod
    def from_dict(cls, data: dict) -> "FloorOp":
        return cls(data["name"], data["bytes"], data["temporary_bytes"])


@dataclass(frozen=True)
class AnalysisSummary:
    """The step graph in numbers (`lms.internal.Analysis.summary`) and its swap-only floor."""

    vertices: int
    edges: int
    levels: int
    learning_parameter_bytes: int
    variable_bytes: int
    input_bytes: int
    largest_op: OpBytes  # TFLMSv2's "largest operation": inputs + outputs
    unknown_size_tensors: int
    kernels: str | None = None  # whose convolution temporaries were counted
    loops: tuple[OpBytes, ...] | None = None  # While loops' lists kept for the gradient
    floor_op: FloorOp | None = None

    def to_dict(self) -> dict:
        return {
            "vertices": self.vertices,
            "edges": self.edges,
            "levels": self.levels,
            "learning_parameter_bytes": self.learning_parameter_bytes,
            "variable_bytes": self.variable_bytes,
            "input_bytes": self.input_bytes,
            "largest_op": self.largest_op.to_dict(),
            "unknown_size_tensors": self.unknown_size_tensors,
            "kernels": self.kernels,
            "loops": None if self.loops is None else [loop.to_dict() for loop in self.loops],
            "floor_op": None if self.floor_op is None else self.floor_op.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "AnalysisSummary":
        loops, floor = data.get("loops"), data.get("floor_op")
        return cls(
            data["vertices"],
            data["edges"],
            data["levels"],
            data["learning_parameter_bytes"],
            data["variable_bytes"],
            data["input_bytes"],
            OpBytes.from_dict(data["largest_op"]),
            data["unknown_size_tensors"],
            data.get("kernels"),
            None if loops is None else tuple(OpBytes.from_dict(loop) for loop in loops),
            None if floor is None else FloorOp.from_dict(floor),
        )


@dataclass(frozen=True)
class Timeline:
    """The simulated memory over the step, max-pooled to at most `TIMELINE_POINTS` points."""

    device_bytes_without_lms: tuple[int, ...]
    device_bytes_with_lms: tuple[int, ...] | None  # None: no plan (nothing swapped)
    host_bytes: tuple[int, ...] | None

    def to_dict(self) -> dict:
        return {
            "device_bytes_without_lms": list(self.device_bytes_without_lms),
            "device_bytes_with_lms": _list(self.device_bytes_with_lms),
            "host_bytes": _list(self.host_bytes),
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Timeline":
        return cls(
            tuple(data["device_bytes_without_lms"]),
            _tuple(data.get("device_bytes_with_lms")),
            _tuple(data.get("host_bytes")),
        )


@dataclass(frozen=True)
class PlanReport:
    """What a plan is (`LMS.report`): its budget (the measured peak's limit) and the budget it
    was planned for (lower after the closed loop's corrections), simulated peaks, swaps, the peak
    explained, the timeline; `calibration` says what the closed loop measured (None: it did not).

    Keys that older records lack load as None: `planned_budget_bytes` and `fits` (before the
    closed loop), `peak` (before the peak was explained), `timeline` (before timelines), and
    whatever a hand-written record (a test's fixture) leaves out."""

    budget_bytes: int
    planned_budget_bytes: int | None
    fits: bool | None  # the simulated peak is within the planned budget
    lms_needed: bool
    parameters: dict  # lms.Parameters.as_dict() of the plan
    peak_bytes_without_lms: int
    peak_op_without_lms: str
    peak_bytes_with_lms: int
    peak_op_with_lms: str
    host_peak_bytes: int
    swapped_tensors: int
    swap_ins: int
    swapped_bytes: int
    swapped_in_bytes: int
    simulations: int
    peak: dict | None  # lms.internal.explain_peak: what holds memory at the peak and why
    analysis: AnalysisSummary | None  # None: only in a hand-written record
    timings_s: dict  # seconds of trace, analysis, tune (and rewrite)
    timeline: Timeline | None
    calibration: dict | None = None  # lms.calibration: Calibration.as_dict() or a cache entry
    # ops split into pieces (lms/split/rewrite.py Split.as_dict: op, op_type, pieces, axis, bytes,
    # why); None in records from before splitting, () when nothing was split
    splits: tuple | None = None
    # of `swapped_tensors`, the loops' tensor lists swapped stacked (lms/device/lists.py); None
    # when none is (not written then, as in records from before lists could be swapped)
    swapped_lists: int | None = None
    # swaps of the tuned parameters' plan its budget did not need, dropped (lms/tuning/prune.py);
    # None when none was (not written then, as in records from before plans were pruned)
    dropped_swaps: int | None = None
    # loop lists streamed through the host store element by element (lms/device/list_streams.py);
    # None when none is (not written then)
    streamed_lists: int | None = None
    # True: `splits` and the peaks are the model's, nothing made (`LMS.plan_only` of a plan that
    # fits as modelled: lms/split/modelled.py); None otherwise (not written then)
    splits_modelled: bool | None = None

    def to_dict(self) -> dict:
        data = {
            "budget_bytes": self.budget_bytes,
            "planned_budget_bytes": self.planned_budget_bytes,
            "fits": self.fits,
            "lms_needed": self.lms_needed,
            "parameters": self.parameters,
            "peak_bytes_without_lms": self.peak_bytes_without_lms,
            "peak_op_without_lms": self.peak_op_without_lms,
            "peak_bytes_with_lms": self.peak_bytes_with_lms,
            "peak_op_with_lms": self.peak_op_with_lms,
            "host_peak_bytes": self.host_peak_bytes,
            "swapped_tensors": self.swapped_tensors,
            "swap_ins": self.swap_ins,
            "swapped_bytes": self.swapped_bytes,
            "swapped_in_bytes": self.swapped_in_bytes,
            "simulations": self.simulations,
            "peak": self.peak,
            "analysis": None if self.analysis is None else self.analysis.to_dict(),
            "timings_s": self.timings_s,
            "timeline": None if self.timeline is None else self.timeline.to_dict(),
        }
        if self.calibration is not None:
            data["calibration"] = self.calibration
        if self.splits:
            data["splits"] = [dict(split) for split in self.splits]
        if self.swapped_lists:
            data["swapped_lists"] = self.swapped_lists
        if self.dropped_swaps:
            data["dropped_swaps"] = self.dropped_swaps
        if self.streamed_lists:
            data["streamed_lists"] = self.streamed_lists
        if self.splits_modelled:
            data["splits_modelled"] = True
        return data

    @classmethod
    def from_dict(cls, data: dict) -> "PlanReport":
        """Any form a record holds; a key it lacks loads as None (`timings_s`: {})."""
        analysis, timeline = data.get("analysis"), data.get("timeline")
        names = [f.name for f in dataclasses.fields(cls)]
        values = {name: data.get(name) for name in names}
        values["analysis"] = None if analysis is None else AnalysisSummary.from_dict(analysis)
        values["timeline"] = None if timeline is None else Timeline.from_dict(timeline)
        values["timings_s"] = data.get("timings_s", {})
        values["splits"] = tuple(data.get("splits") or ())
        return cls(**values)

    def with_calibration(self, calibration: dict | None) -> "PlanReport":
        return dataclasses.replace(self, calibration=calibration)


@dataclass(frozen=True)
class SwapTraffic:
    """The swap traffic per step (`LMSFunction.traffic`): swaps and bytes each way, and seconds
    and bandwidth where a copy's own duration was measured, as `copy` says:
    - "emulated link": the link's transfers, each from when its engine began it to its end;
    - "none": the emulated device without a link, where nothing crosses one;
    - "GPU copy events": the copy engines' events of the last `profile()` step; the swaps,
      bytes and seconds are those of the copies matched to LMS's swaps by their send/recv
      names (`source` "copy events"; lms/observe/copy_events.py `swap_copies`), the step's other
      copies (the input batch's, ...) are in `other_copies`;
    - "not profiled": device copies (a GPU) before any `profile()`: the plan's swaps;
    - "two devices": the two-device mode (lms/device/target.py): the plan's swaps, no copy events.
    The plan's swaps and bytes per step (`planned_*`) stand beside what was counted or measured
    (None: a record before them). `version` 2; version 1 records (no `version`, no `copy`) timed the
    swap ops' bookkeeping,
    not a copy: their seconds and bandwidths are not a link's."""

    # "host-store" (counted in the store), "copy events" (a GPU's copies of a profiled step,
    # matched to swaps) or "plan" (device copies not profiled: each planned swap once a step)
    source: str
    steps: int
    swap_outs_per_step: float
    swap_ins_per_step: float
    out_bytes_per_step: float
    in_bytes_per_step: float
    link: dict | None  # lms.Link.as_dict() of the emulated link
    out_seconds_per_step: float | None
    out_bandwidth: float | None
    in_seconds_per_step: float | None
    in_bandwidth: float | None
    copy: str | None = None  # None: a version 1 record
    version: int = 2
    planned_swap_outs_per_step: float | None = None
    planned_swap_ins_per_step: float | None = None
    planned_out_bytes_per_step: float | None = None
    planned_in_bytes_per_step: float | None = None
    # copies of the profiled step matched to no swap: {"out"/"in": {"copies", "bytes", "seconds"}}
    other_copies: dict | None = None

    def to_dict(self) -> dict:
        return {
            "version": self.version,
            "source": self.source,
            "copy": self.copy,
            "steps": self.steps,
            "swap_outs_per_step": self.swap_outs_per_step,
            "swap_ins_per_step": self.swap_ins_per_step,
            "out_bytes_per_step": self.out_bytes_per_step,
            "in_bytes_per_step": self.in_bytes_per_step,
            "link": self.link,
            "out_seconds_per_step": self.out_seconds_per_step,
            "out_bandwidth": self.out_bandwidth,
            "in_seconds_per_step": self.in_seconds_per_step,
            "in_bandwidth": self.in_bandwidth,
            "planned_swap_outs_per_step": self.planned_swap_outs_per_step,
            "planned_swap_ins_per_step": self.planned_swap_ins_per_step,
            "planned_out_bytes_per_step": self.planned_out_bytes_per_step,
            "planned_in_bytes_per_step": self.planned_in_bytes_per_step,
            "other_copies": self.other_copies,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "SwapTraffic":
        return cls(
            source=data["source"],
            steps=data["steps"],
            swap_outs_per_step=data["swap_outs_per_step"],
            swap_ins_per_step=data["swap_ins_per_step"],
            out_bytes_per_step=data["out_bytes_per_step"],
            in_bytes_per_step=data["in_bytes_per_step"],
            link=data.get("link"),
            out_seconds_per_step=data.get("out_seconds_per_step"),
            out_bandwidth=data.get("out_bandwidth"),
            in_seconds_per_step=data.get("in_seconds_per_step"),
            in_bandwidth=data.get("in_bandwidth"),
            copy=data.get("copy"),
            version=data.get("version", 1),
            planned_swap_outs_per_step=data.get("planned_swap_outs_per_step"),
            planned_swap_ins_per_step=data.get("planned_swap_ins_per_step"),
            planned_out_bytes_per_step=data.get("planned_out_bytes_per_step"),
            planned_in_bytes_per_step=data.get("planned_in_bytes_per_step"),
            other_copies=data.get("other_copies"),
        )


@dataclass(frozen=True)
class DiskUsage:
    """The host store's disk (the `host_disk` option) as the steps used it (`LMS.disk_usage()`):
    its directory, the most bytes its files held at once, and its speed in bytes/s, written
    (the swap-outs' way) and read (the swap-ins'), where the store measured it: it does when a
    plan spills (lms/device/host_arrays.py `measure_disk`); None where none did."""

    directory: str
    peak_bytes: int
    write_bandwidth: float | None = None
    read_bandwidth: float | None = None

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "DiskUsage":
        return cls(
            data["directory"],
            data["peak_bytes"],
            data.get("write_bandwidth"),
            data.get("read_bandwidth"),
        )
