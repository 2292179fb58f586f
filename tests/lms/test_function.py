"""lms/function.py (LMSFunction): what a step leaves behind (the host store empty after each
step, host memory flat over many steps), and the fallback when TensorFlow refuses the order.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging
import math

import pytest
import tensorflow as tf
from lms_cases import workload_case
from lms_equivalence import aggressive, mixed_block_case

import lms

pytestmark = pytest.mark.compat


def test_a_swap_in_that_never_runs_is_freed_after_the_step(monkeypatch, caplog):
    """The safety net behind the analysis: with dead reads and pruned ops not recognised,
    swap-ins are planned for reads that never happen; the step must still leave nothing on the
    host."""
    import lms.graph.reader
    import lms.planning.planner

    monkeypatch.setattr(lms.graph.reader, "drop_dead_reads", lambda *args: None)
    monkeypatch.setattr(lms.graph.reader, "mark_pruned", lambda *args: None)
    # the dead reads are an IdentityN's, an alias the planner never feeds a swap-in: let it
    monkeypatch.setattr(lms.planning.planner, "ALIAS_OPS", frozenset())
    case = mixed_block_case()
    planner = aggressive()
    step = planner.wrap(case.step)
    with caplog.at_level(logging.WARNING, logger="lms"):
        for _ in range(3):
            step(case.images, case.labels)
            assert planner.store.held_bytes == 0
    assert caplog.text.count("were not swapped back in during the step") == 1


def flush_delayed_decrefs():
    """Release arrays TensorFlow has let go of but not yet handed back to Python: a tensor that
    wraps a numpy array (a swap-in's) and dies on an executor thread queues its array, and the
    next eager op releases the queue. Without this the count depends on timing."""
    import gc

    for _ in range(2):
        float(tf.constant(1.0) + 1.0)
        gc.collect()


def objects_kept(function, case, steps=300):
    """Python objects allocated during `steps` calls that are still alive after them, counted
    between two snapshots taken after 100 + `steps` calls (so that caches have filled, and what
    waits for release when a snapshot is taken is as much at both: under load a few hundred
    swap-in arrays, whatever the number of steps), and the three source lines that kept the
    most (for the failure message)."""
    import tracemalloc

    tracemalloc.start()
    try:
        for _ in range(100 + steps):
            function(case.images, case.labels)
        flush_delayed_decrefs()
        before = tracemalloc.take_snapshot()
        for _ in range(steps):
            function(case.images, case.labels)
        flush_delayed_decrefs()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    differences = after.compare_to(before, "lineno")
    where = [f"{s.traceback[0]}: {s.count_diff:+d}" for s in differences[:3] if s.count_diff]
    return sum(stat.count_diff for stat in differences), where


def test_host_memory_stays_flat_over_many_steps():
    """With everything swapped, hardly more objects outlive the steps than without LMS (TF 2.21:
    none; Keras 2 keeps ~1 a step either way). TensorFlow's PyFunc kept one per swap-out per step
    (14,115 over 300 steps here) while the swap-out returned a 0-d handle."""
    case = mixed_block_case()
    planner = aggressive()
    step = planner.wrap(case.step)
    steps = 300
    with_lms, where = objects_kept(step, case, steps)
    plain, _ = objects_kept(case.step, case, steps)
    assert planner.report.swapped_tensors > 20 and planner.store.held_bytes == 0
    # one object per swap-out per step was 14,000 here; what waits for release under load
    # varies by a few hundred between snapshots
    allowed = plain + 3 * steps
    assert with_lms < allowed, f"{with_lms} kept over {steps} steps ({plain} plain): {where}"


@pytest.mark.kernels
@pytest.mark.skipif(
    not lms.internal.cpu_paired_reads(), reason="oneDNN is off: no graph pass fuses"
)
def test_an_order_tensorflow_cannot_run_falls_back_to_its_own(monkeypatch, caplog):
    """oneDNN's graph pass fuses a filter gradient with the BiasAddGrad beside it; a swap-in
    triggered by one and read by the other then sits inside one op ("nodes in a cycle"). The
    planner avoids such triggers; with that rule switched off the step must still train, planned
    again in TensorFlow's own order, and an explicit ordering=1 must say why it cannot."""
    import lms.planning.planner
    import lms.tuning.tuner

    monkeypatch.setattr(lms.planning.planner, "_neighbours", lambda analysis, group: set())
    monkeypatch.setattr(lms.tuning.tuner, "AUTO_ORDERINGS", (1, 0))
    case = workload_case("googlenet", 96, 4)
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    device_memory = int(lms.internal.simulate(analysis).peak_bytes * 0.7)
    # bytes asked only: with the allocator's padding TensorFlow's own order cannot fit 0.7 x here;
    # no closed loop: this process's allocator holds what earlier tests left (the loop measures
    # the whole device), and what is tested here happens before any measurement
    planner = lms.LMS(
        device_memory=device_memory, safety_ratio=1.0, allocator=None, calibration_steps=0
    )
    step = planner.wrap(tf.function(case.step.python_function))
    with caplog.at_level(logging.WARNING, logger="lms"):
        loss = float(step(case.images, case.labels))
    if "made a cycle" not in caplog.text:
        pytest.skip("no graph pass fused across the order here (oneDNN off?)")
    assert math.isfinite(loss) and planner.report.parameters["ordering"] == 0
    assert planner.report.swapped_tensors > 0 and planner.store.held_bytes == 0
    float(step(case.images, case.labels))  # the replanned step keeps working
    explicit = lms.LMS(device_memory=device_memory, safety_ratio=1.0, ordering=1, allocator=None)
    with pytest.raises(lms.LMSError, match="ordering=1 cannot be enforced on this step"):
        explicit.wrap(tf.function(case.step.python_function))(case.images, case.labels)
