"""The report's limits table: per workload, host and search, the largest size that trained with
LMS off and with LMS on, and the factor LMS gained (in pixels or voxels for resolution, in samples
for batch), with splitting too where a search ran with `lms.split`, and beside the gain the
swap-only bound (`suite.reporting.swap_bound`): how far swapping alone could go, and the op that
sets it; last, what set each limit (the search's stop, or the first size that failed and why).
A limit LMS reached with a disk lent to its host store (`inv search --host-disk`) says what the
disk held there and how fast it was, so a disk-backed limit reads apart from a RAM-bound one.
Each limit's margin follows (`suite.running.boundary`): its verdict, then the measured peak over
the budget at the limit and at the first size that failed; a gain from an uncertain limit says
so."""

import re
from collections import defaultdict

from tabulate import tabulate

from suite.records import SearchRecord, TrialRecord
from suite.reporting.swap_bound import bound_text, lms_reports
from suite.running.boundary import is_uncertain, margin_text
from suite.units import format_bytes


def _limit_text(record: SearchRecord | None, disks: dict | None = None) -> str:
    if record is None:
        return "not searched"
    largest = record.largest_ok
    if largest is None:
        return f"none (< {record.range[0]})"
    text = f"≥ {largest} (stop)" if record.stop_reached else str(largest)
    used = _disk_at_limit(record, disks or {})
    return f"{text} ({disk_text(used)})" if used else text


def disk_text(usage) -> str:
    """ "disk: 3.2 GiB peak, 0.3 GB/s write, 1.2 read": what a trial's host store kept on the
    disk its host lent it (`Metrics.lms_disk`, an lms.DiskUsage), and the disk's speed where
    the store measured it (a plan spilled)."""
    text = f"disk: {format_bytes(usage.peak_bytes)} peak"
    if usage.write_bandwidth and usage.read_bandwidth:
        write, read = usage.write_bandwidth / 1e9, usage.read_bandwidth / 1e9
        text += f", {write:.2g} GB/s write, {read:.2g} read"
    return text


def _disk_at_limit(record: SearchRecord, disks: dict):
    """The disk the trials at a search's limit were lent (the one that held the most), None
    when they ran with RAM only: what tells a disk-backed limit from a RAM-bound one."""
    found = [
        usage
        for trial in record.trials
        if trial.value == record.largest_ok and trial.outcome == "ok"
        for usage in disks.get((record.host, trial.spec_hash), ())
    ]
    return max(found, key=lambda usage: usage.peak_bytes, default=None)


def _rate_at_limit(record: SearchRecord | None) -> float | None:
    """images/sec of the trial at the largest size that trained."""
    if record is None or record.largest_ok is None:
        return None
    for trial in record.trials:
        if trial.value == record.largest_ok and trial.outcome == "ok":
            return trial.images_per_sec
    return None


def gain_text(off: SearchRecord | None, on: SearchRecord | None) -> str:
    if not off or not on or on.largest_ok is None:
        return "—"
    if off.largest_ok is None:
        return "only with LMS"
    ratio = on.largest_ok / off.largest_ok
    if on.searched == "resolution":
        info = on.params.info
        text = f"{ratio**info.spatial_dims:.2f}× {info.element}"
    else:
        text = f"{ratio:.2f}× batch"
    notes = ["at least"] if on.stop_reached else []
    notes += ["uncertain"] if is_uncertain(off) or is_uncertain(on) else []
    return text + (f" ({', '.join(notes)})" if notes else "")


def margin_cell(record: SearchRecord | None) -> str:
    """ "confirmed: 0.96 / 1.01" (suite.running.boundary); "—" where the mode was not searched."""
    return "—" if record is None else margin_text(record)


def rate_at_limit_text(record: SearchRecord | None) -> str:
    rate = _rate_at_limit(record)
    if rate is None:
        return "—"
    params, value = record.params, record.largest_ok
    info = params.info
    resolution = value if record.searched == "resolution" else params.resolution
    elements = rate * info.elements_per_sample(resolution) / 1e6
    return f"{rate:.3g} img/s, {elements:.3g} {info.rate_unit}"


def _variant(record: SearchRecord) -> str:
    """ "off", "on" (swapping alone: the suite's LMS unless a spec asks for splitting) or
    "split" (`lms.split` "auto" or forced)."""
    if record.mode == "off":
        return "off"
    return "on" if (record.lms or {}).get("split", "off") == "off" else "split"


OUTCOME_TEXT = {"out_of_memory": "out of memory", "timed_out": "timed out"}


MEASURED = re.compile(r"measured peak (\d+) B exceeds the memory budget (\d+) B")


def _op_name(name: str) -> str:
    """An op's name without the gradient tape's and the model's scopes."""
    parts = name.split("/")
    parts = parts[1:] if parts[0] == "gradient_tape" else parts
    return "/".join(parts[1:]) or name


def failure_cause(error: str) -> str:
    """The clause of a failed trial's error that says what stopped it (lms's own wording)."""
    measured = MEASURED.search(error)
    if measured:
        peak, budget = (format_bytes(int(b)) for b in measured.groups())
        return f"measured peak {peak} over {budget}"
    for marker, text in (
        ("splitting cannot lower the floor: ", "floor op {} cannot be split"),
        ("the floor is a piece of ", "memory of a piece of {}"),
        ("lms.split.fit.MAX_PIECES", "the pieces a plan may have"),
        ("alone fill the budget", "resident bytes fill the budget"),
        ("no op left above", "every large op split, plan still over"),
        ("OOM killer", "host memory: killed by the OOM killer"),
        ("free on the disk of", "host disk: the plan needs more than the disk has"),
        ("host memory: the plan holds", "host memory: the plan needs more than the host has"),
        ("MemoryError", "host memory"),
        ("the largest operation, ", "largest op {}"),
    ):
        if marker in error:
            name = error.split(marker, 1)[1].split(":")[0].split(",")[0]
            return text.format(_op_name(name))
    return error.splitlines()[0][:60] if error else ""


def stopped_by(record: SearchRecord | None, errors: dict) -> str:
    """What set a search's limit: its stop, or the first size that failed and why."""
    if record is None:
        return ""
    if record.stop_reached:
        return "the search's stop"
    if record.smallest_failed is None:
        return "—"
    outcome = OUTCOME_TEXT.get(record.failed_outcome, record.failed_outcome or "failed")
    failed = [t for t in record.trials if t.value == record.smallest_failed and t.outcome != "ok"]
    error = errors.get((record.host, failed[0].spec_hash), "") if failed else ""
    cause = failure_cause(error or "")
    return f"{outcome} at {record.smallest_failed}" + (f" ({cause})" if cause else "")


def limits_table(
    search_records: list[SearchRecord], trial_records: list[TrialRecord]
) -> str | None:
    """One row per (search, host); the LMS-off and LMS-on searches side by side, and the
    searches with splitting (issue 31) beside them when any ran. The trial records hold the LMS
    reports the swap-only bound is estimated from, and the errors that say what set a limit."""
    reports = lms_reports(trial_records)
    errors = {(t.host, t.spec_hash): t.error for t in trial_records if t.error}
    disks = defaultdict(list)  # the disks lent to LMS, by trial
    for t in trial_records:
        if t.metrics is not None and t.metrics.lms_disk is not None:
            disks[(t.host, t.spec_hash)].append(t.metrics.lms_disk)
    pairs = defaultdict(dict)
    for record in search_records:  # newest record of each variant wins
        pairs[(record.limit_key, record.host)][_variant(record)] = record
    if not pairs:
        return None
    splitting = any("split" in modes for modes in pairs.values())
    rows = []
    for (_, host), modes in sorted(pairs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        off, on, split = modes.get("off"), modes.get("on"), modes.get("split")
        any_record = off or on or split
        p = any_record.params
        fixed = f"batch {p.batch}" if any_record.searched == "resolution" else f"{p.resolution}px"
        trials = "/".join(str(len(m.trials)) if m else "—" for m in (off, on))
        row = [
            p.workload,
            f"max {any_record.searched} ({fixed}, {p.precision})",
            host,
            format_bytes(p.memory_budget_bytes) if p.memory_budget_bytes else "device",
            _limit_text(off),
            _limit_text(on, disks),
            gain_text(off, on),
            bound_text(off, on, reports),
            margin_cell(off),
            margin_cell(on),
            rate_at_limit_text(off),
            rate_at_limit_text(on),
            trials,
        ]
        if splitting:
            row += [_limit_text(split, disks), gain_text(off, split), rate_at_limit_text(split)]
        causes = [(name, stopped_by(m, errors)) for name, m in modes.items()]
        order = {"off": 0, "on": 1, "split": 2}
        row.append("; ".join(f"{n}: {c}" for n, c in sorted(causes, key=lambda x: order[x[0]])))
        rows.append(row)
    headers = [
        "workload",
        "search",
        "host",
        "memory",
        "LMS off",
        "LMS on",
        "LMS gain",
        "swap-only bound",
        "peak/budget off",
        "peak/budget on",
        "rate at limit, off",
        "rate at limit, on",
        "trials off/on",
    ]
    if splitting:
        headers += ["with splitting", "gain with splitting", "rate at limit, splitting"]
    headers.append("what set the limits")
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)
