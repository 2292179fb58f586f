"""lms/split/worth.py: a step whose largest op alone is over the room splits without tuning
swaps first, and plans as it did after them; once a round fits as modelled, the next is taken
while its swaps save more than half the bytes of the ops it adds.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging

import pytest
from lms_cases import workload_case

import lms
import lms.split.fit
import lms.split.worth

pytestmark = pytest.mark.compat


def test_a_step_past_swapping_splits_without_tuning_swaps_first(monkeypatch, caplog):
    """GoogLeNet 1024² b1 in 150 MiB: its largest op (the first pool's gradient) alone is over
    the room beside the resident bytes, so no swap plan can fit (`past_swapping`): the rounds
    start without tuning swaps (which only says that, twice: pools paired, then recomputed),
    and the plan is the one they made after those tunings."""
    case = workload_case("googlenet", 1024, 1)
    args = (case.step, case.images, case.labels)
    with caplog.at_level(logging.INFO, logger="lms"):
        skipped = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    messages = [r.getMessage() for r in caplog.records]
    first_round = next(k for k, m in enumerate(messages) if m.startswith("to split "))
    assert not any("No swapout_threshold fits" in m for m in messages[:first_round])
    caplog.clear()
    monkeypatch.setattr(lms.split.worth, "past_swapping", lambda analysis, budget: None)
    with caplog.at_level(logging.INFO, logger="lms"):
        tuned = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    messages = [r.getMessage() for r in caplog.records]
    first_round = next(k for k, m in enumerate(messages) if m.startswith("to split "))
    assert any("No swapout_threshold fits" in m for m in messages[:first_round])
    assert skipped.fits and tuned.fits
    assert [s["op"] for s in skipped.splits] == [s["op"] for s in tuned.splits]
    assert skipped.peak_bytes_with_lms == tuned.peak_bytes_with_lms
    assert skipped.peak_bytes_without_lms == tuned.peak_bytes_without_lms  # the step as traced


def test_a_round_after_the_first_that_fits_is_taken_while_its_splits_pay(monkeypatch, caplog):
    """GoogLeNet 1024² b1 in 150 MiB: the rounds modelled after the first that fits are kept
    only while their swaps move fewer bytes than the first's by more than SWAPS_FOR_SPLITS of
    the bytes of the ops they add; with splits never paying the plan is the first that fits,
    with splits always paying it splits more ops, and its swaps move fewer bytes."""
    case = workload_case("googlenet", 1024, 1)
    args = (case.step, case.images, case.labels)

    def planned(share):
        monkeypatch.setattr(lms.split.worth, "SWAPS_FOR_SPLITS", share)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="lms"):
            report = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
        rounds = [
            r.getMessage() for r in caplog.records if "Splitting as modelled" in r.getMessage()
        ]
        return report, rounds

    first, rounds_first = planned(float("inf"))  # never pays: the first round that fits
    every, rounds_every = planned(-float("inf"))  # always pays: every round that fits
    assert first.fits and every.fits
    assert len(every.splits) > len(first.splits)  # (here 271 and 23)
    assert len(rounds_every) > len(rounds_first)
    swapped = [r.swapped_bytes for r in (first, every)]
    assert swapped[1] < swapped[0], swapped  # (37 MB and 851)


def test_splits_pay_counts_the_added_ops_bytes_against_the_swaps_saved():
    """`splits_pay`: only the ops a round adds count, each by its inputs' and outputs' bytes
    (`op_bytes`), against the swap bytes it saves over the round chosen."""
    import tensorflow as tf

    from lms.split.rewrite import op_bytes

    @tf.function
    def step(x):
        return tf.nn.relu(x) * 2.0

    graph = step.get_concrete_function(tf.TensorSpec((1, 256, 256, 4))).graph
    relu = next(op for op in graph.get_operations() if op.type == "Relu")
    mul = next(op for op in graph.get_operations() if op.type == "Mul")
    chosen = ([(relu.name, 2, "")], [], 10 * op_bytes(relu))  # its swaps' traffic
    both = [(relu.name, 2), (mul.name, 2)]
    cost = lms.split.worth.SWAPS_FOR_SPLITS * op_bytes(mul)  # the Relu is split already
    pays = lms.split.worth.splits_pay
    assert pays(graph, chosen, both, chosen[2] - int(cost) - 1)
    assert not pays(graph, chosen, both, chosen[2] - int(cost) + 1)
    assert not pays(graph, chosen, [(relu.name, 2)], chosen[2])  # nothing added, nothing saved
