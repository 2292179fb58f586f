"""The judges of `inv gpucheck` (suite/running/gpucheck.py): what each check's process found,
turned into failure lines, one per thing that is wrong, each with the expected and the measured
values (the expectations are suite/running/gpucheck_checks.py's `EXPECT`).

Pure functions of lms's reports (`lms.PlacementReport`, its timings, `lms.grappler_replays`) and
of the plain dicts the check processes write: no TensorFlow, no processes, so the tests show each
one fail on what a broken GPU path would give it.
"""

from suite.running.gpucheck_checks import EXPECT


def placement_failures(report) -> list[str]:
    """Check a (and the split step of e): an `lms.PlacementReport` of one step. Every kept LMS op
    ran, on its device; every swap-in's host-to-device send waits for its trigger; every piece's
    host slice waits for the piece before; Grappler added no swaps and no layout transposes."""
    failures = []
    if not report.planned:
        failures.append("the step has no LMS ops: nothing was checked (the plan swapped nothing)")
    if report.missing:
        failures.append(
            f"{len(report.missing)} of {len(report.planned)} LMS ops did not run (removed by "
            f"Grappler or the partitioner), e.g. {', '.join(report.missing[:3])}"
        )
    if report.misplaced:
        failures.append(
            f"{len(report.misplaced)} LMS ops ran on another device than placed, e.g. "
            + ", ".join(f"{n} on {report.ran[n]}" for n in report.misplaced[:3])
        )
    for check in report.swap_ins:
        if not check.gated:
            why = (
                "did not run"
                if check.device is None
                else f"waits for {check.gate or 'nothing'}"
                if check.send
                else "sends nothing to the device (no _Send of its output)"
            )
            failures.append(
                f"swap-in {check.name} is not gated by its trigger {check.trigger}: {why}"
            )
    ungated_reads = [name for name, gated in report.piece_reads.items() if not gated]
    if ungated_reads:
        failures.append(
            f"{len(ungated_reads)} of {len(report.piece_reads)} piece reads do not wait for the "
            f"piece before, e.g. {ungated_reads[0]}"
        )
    if report.grappler_swaps:
        failures.append(
            f"Grappler's memory optimizer added {len(report.grappler_swaps)} swap ops of its own, "
            f"e.g. {report.grappler_swaps[0]}"
        )
    if report.transposes:
        failures.append(
            f"Grappler's layout optimizer added {len(report.transposes)} transposes, e.g. "
            f"{report.transposes[0]}"
        )
    return failures


def timing_failures(timings, clock: str) -> list[str]:
    """Check b: `lms.PlacementReport.timings` (`clock`: "host" sends or "device" copy events).
    Every swap-in's copy started at or after its trigger ended; none unmatched."""
    if not timings:
        return [f"no swap-in was timed on the {clock} timeline (the step swapped nothing?)"]
    failures = []
    for t in timings:
        if t.start is None or t.trigger_end is None:
            missing = "its copy" if t.start is None else f"its trigger {t.trigger}"
            failures.append(f"swap-in {t.name}: the {clock} timeline has no event of {missing}")
        elif not t.after_trigger:
            failures.append(
                f"swap-in {t.name}: its copy started at {t.start * 1e3:.3f} ms, before its "
                f"trigger {t.trigger} ended at {t.trigger_end * 1e3:.3f} ms ({clock} timeline)"
            )
    return failures


def memory_failures(rows: list[dict]) -> list[str]:
    """Check c, GPU only: per row (precision, ordering) the measured peaks of the plain and the
    LMS step and the simulation's. The measured drop is at least `drop_share` of the simulated
    one, and the LMS step's measured peak is within `peak_model_error` of the simulated."""
    failures = []
    for row in rows:
        label = f"{row['precision']} ordering {row['ordering']}"
        measured_drop = row["plain_peak"] - row["lms_peak"]
        simulated_drop = row["simulated_without"] - row["simulated_with"]
        if measured_drop < EXPECT["drop_share"] * simulated_drop:
            failures.append(
                f"{label}: the peak dropped {_mib(measured_drop)} (plain {_mib(row['plain_peak'])}"
                f", LMS {_mib(row['lms_peak'])}); expected at least {EXPECT['drop_share']:.0%} of "
                f"the simulated drop {_mib(simulated_drop)} ({_mib(row['swapped_bytes'])} swapped)"
            )
        error = row["lms_peak"] / max(row["simulated_with"], 1) - 1
        if abs(error) > EXPECT["peak_model_error"]:
            failures.append(
                f"{label}: measured LMS peak {_mib(row['lms_peak'])} is {error:+.1%} from the "
                f"simulated {_mib(row['simulated_with'])}; expected within "
                f"{EXPECT['peak_model_error']:.0%}"
            )
    return failures


def replay_failures(replays: dict, real: dict | None = None) -> list[str]:
    """Check d: `lms.grappler_replays`' {"lms": ..., "default": ...} and, from a
    real run's optimized graph, {"removed", "grappler_swaps", "transposes"}. With LMS's
    configuration Grappler must keep every LMS op and add no swap and no transpose; what
    TensorFlow's defaults would do is what LMS turns off, not a failure."""
    failures = []
    lms_replay = replays["lms"]
    for key, what in (
        ("removed", "LMS ops removed"),
        ("grappler_swaps", "swap ops of its memory optimizer"),
        ("transposes", "layout transposes"),
    ):
        if lms_replay[key]:
            failures.append(
                f"Grappler replayed on a virtual GPU with LMS's configuration: "
                f"{len(lms_replay[key])} {what}, e.g. {lms_replay[key][0]}"
            )
        if real and real.get(key):
            failures.append(
                f"the step's optimized graph as it ran: {len(real[key])} {what}, "
                f"e.g. {real[key][0]}"
            )
    return failures


def update_failures(found: dict) -> list[str]:
    """Check e: the split step's loss and variable updates against the plain step's (`found`
    from the worker: relative loss difference, the variables whose update differs by more than
    the tolerance)."""
    failures = []
    if not found["splits"]:
        failures.append("the plan split no op: nothing was checked")
    if found["loss_relative"] > EXPECT["update_rtol"]:
        failures.append(
            f"split step's loss {found['loss']:.7g} vs plain {found['plain_loss']:.7g}: "
            f"{found['loss_relative']:.2g} relative, over {EXPECT['update_rtol']:g}"
        )
    if found["mismatched"]:
        worst = max(found["mismatched"], key=lambda m: m[1])
        failures.append(
            f"{len(found['mismatched'])} of {found['variables']} variables updated differently "
            f"from the plain step, worst {worst[0]} by {worst[1]:.2g} relative (tolerance "
            f"{EXPECT['update_rtol']:g})"
        )
    return failures


def copy_bytes_failures(planned: int, copied: int) -> list[str]:
    """Check e, GPU only: the bytes the copy events moved against the bytes the plan moves."""
    low, high = EXPECT["copy_bytes"]
    ratio = copied / planned if planned else float("inf")
    if planned and low <= ratio <= high:
        return []
    return [
        f"the copy events moved {_mib(copied)}, the plan {_mib(planned)} ({ratio:.2f}x; "
        f"expected {low:g}x to {high:g}x)"
    ]


def pinned_failures(found: dict) -> list[str]:
    """Check e: with TF_GPU_HOST_MEM_LIMIT_IN_MB=1 the step's first call raised
    lms.HostMemoryError (saying how to raise the cap) and made no second plan."""
    if found["raised"] != "HostMemoryError":
        what = "ran" if found["raised"] is None else f"raised {found['raised']}"
        return [
            f"with a pinned host cap of 1 MiB the split step {what} instead of raising "
            f"lms.HostMemoryError: {found.get('message') or ''}".rstrip(": ")
        ]
    failures = []
    if "TF_GPU_HOST_MEM_LIMIT_IN_MB" not in found["message"]:
        failures.append(
            f"the HostMemoryError does not say how to raise the cap: {found['message']}"
        )
    if found["plans"] > 1:
        failures.append(f"LMS planned {found['plans']} times before giving up: a re-plan")
    return failures


def _mib(size: float) -> str:
    return f"{size / 2**20:.1f} MiB"
