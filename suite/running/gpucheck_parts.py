"""The parts of `inv gpucheck`'s checks a to d, one per check process
(suite/running/gpucheck_worker.py runs the one its request names): each builds the case
(gpucheck_case.py), runs LMS's swap-everything plan on it, reads what TensorFlow ran and returns
its answer: findings (lines), failures (from gpucheck_judges.py), the GPU-only parts it did not
run and why, and its data.

- placement (a): one step with run metadata, `lms.check_step`;
- timing (b): a profiled step, when each swap-in's copy started against its trigger's end;
- memory (c, GPU only): the plain and the LMS step's measured peaks against the simulation's;
- grappler (d): Grappler replayed on a virtual GPU, and the optimized graph of a real run.
Check e's parts, which split ops instead of swapping, are gpucheck_split.py.
"""

import time

from suite.running.gpucheck_case import COMPUTE, MECHANISMS, SWAP_ALL, build_case, lms_step
from suite.running.gpucheck_checks import NO_COPY_EVENTS, NO_GPU_PASSES, not_run
from suite.running.gpucheck_judges import (
    memory_failures,
    placement_failures,
    replay_failures,
    timing_failures,
)


def placement(mode: str) -> dict:
    """Check a: one more step of the swap-everything plan with run metadata."""
    import lms

    case = build_case(mode)
    _, step = lms_step(case, **SWAP_ALL)
    report = lms.check_step(step, *case.args)
    return {
        "findings": [report.summary()],
        "failures": placement_failures(report),
        "data": report.as_dict(),
    }


def timing(mode: str) -> dict:
    """Check b: a profiled step of the swap-everything plan; when each swap-in's copy started
    against when its trigger ended (lms.check_step(..., timed=True): on the CPU the host-side
    sends, on a GPU the copy events)."""
    import lms

    case = build_case(mode)
    _, step = lms_step(case, **SWAP_ALL)
    report = lms.check_step(step, *case.args, timed=True)
    timings, clock = report.timings, report.clock
    skipped = []
    if clock == "host":
        skipped = [not_run("the device timeline's host-to-device copy events", NO_COPY_EVENTS)]
    late = [t for t in timings if t.after_trigger]
    margins = [t.start - t.trigger_end for t in late]
    what = "copy events" if clock == "device" else "host-side sends"
    finding = f"{len(late)} of {len(timings)} swap-ins: {what} started after the trigger ended"
    if margins:
        finding += f" (by {min(margins) * 1e3:.3f} to {max(margins) * 1e3:.3f} ms)"
    return {
        "findings": [finding],
        "failures": timing_failures(timings, clock),
        "not_run": skipped,
        "data": {"clock": clock, "swap_ins": [t.__dict__ for t in timings]},
    }


def memory(mode: str, precision: str, ordering: int) -> dict:
    """Check c, GPU only: the plain and the LMS step's measured peaks (the GPU allocator's, after
    resetting its statistics) against the simulation's, for one precision and ordering."""
    case = build_case(mode, precision)
    plain_peak, plain_seconds = measured_peak(case.plain, case.args)
    options = {**SWAP_ALL, "device_memory": None, "ordering": ordering}
    import lms

    planner = lms.LMS(mechanism=MECHANISMS[mode], **options)
    step = planner.wrap(case.step)
    lms_peak, lms_seconds = measured_peak(step, case.args)
    report = planner.report
    row = {
        "precision": precision,
        "ordering": ordering,
        "plain_peak": plain_peak,
        "lms_peak": lms_peak,
        "simulated_without": report.peak_bytes_without_lms,
        "simulated_with": report.peak_bytes_with_lms,
        "swapped_bytes": report.swapped_bytes,
        "plain_seconds": plain_seconds,
        "lms_seconds": lms_seconds,
    }
    mib = 2**20
    finding = (
        f"{precision} ordering {ordering}: peak plain {plain_peak / mib:.1f} MiB -> LMS "
        f"{lms_peak / mib:.1f} MiB (simulated {row['simulated_without'] / mib:.1f} -> "
        f"{row['simulated_with'] / mib:.1f}, {report.swapped_bytes / mib:.1f} MiB swapped); "
        f"step {plain_seconds * 1e3:.1f} -> {lms_seconds * 1e3:.1f} ms"
    )
    return {"findings": [finding], "failures": memory_failures([row]), "data": row}


def measured_peak(call, args) -> tuple[int, float]:
    """GPU only: (peak bytes, seconds) of one step after two unmeasured ones (tracing, planning,
    cuDNN's autotuning): tf.config.experimental.get_memory_info's peak after reset_memory_stats."""
    import tensorflow as tf

    for _ in range(2):
        float(call(*args))
    tf.config.experimental.reset_memory_stats("GPU:0")
    started = time.perf_counter()
    float(call(*args))
    seconds = time.perf_counter() - started
    return int(tf.config.experimental.get_memory_info("GPU:0")["peak"]), seconds


def grappler(mode: str) -> dict:
    """Check d: Grappler replayed on a virtual GPU (half the plain step's simulated peak: a GPU
    the step does not fit) with LMS's configuration and TensorFlow's defaults, and the optimized
    graph of a real run of the LMS step."""
    import lms

    case = build_case(mode)
    planner, step = lms_step(case, **SWAP_ALL)
    callable_, _ = step.prepare(*case.args)
    memory_bytes = planner.report.peak_bytes_without_lms // 2
    replays = lms.grappler_replays(callable_.graph, memory_bytes)
    report = lms.check_step(step, *case.args)
    real = {
        "removed": report.missing,
        "grappler_swaps": list(report.grappler_swaps),
        "transposes": list(report.transposes),
    }
    findings = [
        f"replayed on a virtual GPU of {memory_bytes / 2**20:.1f} MiB, "
        + _replay_text(replays[config], label)
        for config, label in (("lms", "LMS's configuration"), ("default", "TensorFlow's defaults"))
    ]
    findings.append(
        f"as it ran ({COMPUTE[mode]}, post-optimization graph): {len(real['removed'])} of "
        f"{len(report.planned)} LMS ops removed, {len(real['grappler_swaps'])} Grappler swap ops, "
        f"{len(real['transposes'])} layout transposes"
    )
    skipped = []
    if mode != "gpu":
        skipped.append(
            not_run(
                "Grappler's layout optimizer and memory optimizer's swapping in a real run",
                NO_GPU_PASSES,
            )
        )
    return {
        "findings": findings,
        "failures": replay_failures(replays, real),
        "not_run": skipped,
        "data": {"memory_bytes": memory_bytes, "replay": replays, "real": real},
    }


def _replay_text(replay: dict, label: str) -> str:
    return (
        f"{label}: {len(replay['removed'])} of {replay['lms_ops']} LMS ops removed (dependency "
        f"optimizer), {len(replay['grappler_swaps'])} swap ops (memory optimizer), "
        f"{len(replay['transposes'])} transposes and {replay['nchw_convolutions']} NCHW "
        "convolutions (layout optimizer)"
    )
