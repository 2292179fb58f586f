"""lms/split/fit.py: the `split` option is checked; with `split="auto"`, a step that swapping
alone cannot fit fits in simulation, also when only the allocator's chunks miss the budget; a
piece too large is named as the limit; rounds stop before passing the pieces a plan may have.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging

import keras
import pytest
import tensorflow as tf
from lms_cases import workload_case

import lms
import lms.split.fit
import lms.split.worth
from lms import _tf_private
from lms.errors import ParameterError

pytestmark = pytest.mark.compat


def test_the_split_option_is_checked():
    for bad in ("on", {"AddN": 1}, {"AddN": True}, {}):
        with pytest.raises(ParameterError, match="split"):
            lms.LMS(device_memory="1GiB", split=bad)
    assert lms.LMS(device_memory="1GiB").options.split == "auto"


def test_auto_split_fits_what_swapping_alone_cannot_in_simulation():
    """ResNet50 at 1024² b1 in 400 MiB: swapping alone stops at its largest AddN (a batch norm's
    input gradient, 192 MiB with its inputs; best peak 399.7 MiB over the 360 MiB budget; with
    Keras 2, at a fused batch norm's gradient: 527.5 MiB). With "auto", rounds split the ops
    that crowd the room beside the resident bytes (AddNs along the rows, the first max pool's
    gradient, convolutions with halos, Keras 2's fused batch norms) and a plan fits (356.8 MiB
    here; 348.6 with Keras 2), in a few tunings more, not one per op."""
    case = workload_case("resnet50", 1024, 1)
    args = (case.step, case.images, case.labels)
    swapped = lms.LMS(device_memory="400MiB", calibration_steps=0, split="off").plan_only(*args)
    assert not swapped.fits  # (its floor: an AddN with oneDNN's kernels, a convolution's with
    # Eigen's, whose temporaries are larger)
    split = lms.LMS(device_memory="400MiB", calibration_steps=0).plan_only(*args)  # "auto"
    assert split.fits and split.peak_bytes_with_lms <= split.budget_bytes
    types = {s["op_type"] for s in split.splits}
    if keras.__version__.startswith("2."):
        assert types & {"FusedBatchNormV3", "FusedBatchNormGradV3"}
    else:
        assert {"AddN", "MaxPoolGrad"} <= types  # and convolutions (Eigen's: their gradients)
        assert types & {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"}
    assert all(s["pieces"] >= 2 and s["axis"] == 1 for s in split.splits)
    assert lms.PlanReport.from_dict(split.to_dict()).splits == split.splits


def test_auto_split_also_splits_when_only_the_allocators_chunks_miss_the_budget(caplog):
    """GoogLeNet 1216² b1 in 400 MiB with oneDNN's kernels: the swap plans' bytes asked fit,
    their BFC chunks do not (400 MiB for a 360 MiB budget), and the tuner keeps the closest
    with a warning. Splitting used to start only when no plan's bytes fit, so this size was
    planned over its budget (a search's prediction stopped at 1152²); now it is split too
    (pool1's gradient into pieces: 345.7 MiB). With Eigen's kernels no plan's bytes fit."""
    case = workload_case("googlenet", 1216, 1)
    args = (case.step, case.images, case.labels)
    with caplog.at_level(logging.WARNING, logger="lms"):
        swapped = lms.LMS(device_memory="400MiB", calibration_steps=0, split="off").plan_only(*args)
    assert not swapped.fits and swapped.peak_bytes_with_lms > swapped.budget_bytes
    if _tf_private.onednn_enabled() and not keras.__version__.startswith("2."):
        assert "its bytes asked fit" in caplog.text  # the case this test is about
    split = lms.LMS(device_memory="400MiB", calibration_steps=0).plan_only(*args)
    assert split.fits and split.peak_bytes_with_lms <= split.budget_bytes
    assert "MaxPoolGrad" in {s["op_type"] for s in split.splits}


def test_a_piece_too_large_for_the_room_is_named_as_what_sets_the_limit():
    """Two rows of 1024 x 256 channels: split into its two rows (the most the rows allow), a
    convolution gradient's piece still needs 8 MiB or more with its halo and its kernel's
    temporary where the budget leaves 2.6 MiB. NothingFitsError says the floor is that piece,
    and the limits table reads it as the memory of a piece."""
    from suite.reporting.limits_table import failure_cause

    f1 = tf.Variable(tf.random.stateless_normal([3, 3, 4, 256], seed=(1, 2)) * 0.1)
    f2 = tf.Variable(tf.random.stateless_normal([3, 3, 256, 4], seed=(3, 4)) * 0.1)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = tf.nn.relu(tf.nn.conv2d(x, f1, 1, "SAME"))
            loss = tf.reduce_sum(tf.nn.conv2d(y, f2, 1, "SAME"))
        gradients = tape.gradient(loss, [f1, f2])
        f1.assign_sub(0.01 * gradients[0])
        f2.assign_sub(0.01 * gradients[1])
        return loss

    planner = lms.LMS(device_memory="3MiB", calibration_steps=0)
    with pytest.raises(lms.NothingFitsError) as raised:
        planner.wrap(step)(tf.zeros([1, 2, 1024, 4]))
    message = str(raised.value)
    # oneDNN's kernels: the input gradient's piece; Eigen's: the filter gradient's, whose
    # working set is larger (and which has a single row left to split)
    assert "; the floor is a piece of gradient_tape/Conv2DBackprop" in message
    assert ", split into 2 pieces: " in message
    cause = failure_cause(f"LMS: {message}")
    assert cause.startswith("memory of a piece of gradient_tape/Conv2DBackprop")


def test_auto_split_stops_before_a_round_would_pass_the_pieces_a_plan_may_have(monkeypatch, caplog):
    """A size whose rounds would need more pieces than a plan may have (each adds ops to the
    graph and time to the planning: ResNet50 4096² b1 in 400 MiB grew its planning process past
    13 GiB) gets no such round: the plan keeps the pieces it has, and says why it stopped."""
    case = workload_case("googlenet", 1024, 1)
    args = (case.step, case.images, case.labels)
    # the first round that fits (not the rounds after it that pay in swaps: lms/split/worth.py)
    monkeypatch.setattr(lms.split.worth, "SWAPS_FOR_SPLITS", float("inf"))
    unbounded = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    assert unbounded.fits
    # the pieces the rounds decided, which the cap bounds (not the readers chained after them)
    made = [s["pieces"] for s in unbounded.splits if " are over " in s["why"]]
    # the emulated device's alike pieces loop: its cap is MAX_LOOPED_PIECES (pieces_cap)
    monkeypatch.setattr(lms.split.fit, "MAX_LOOPED_PIECES", sum(made) // 2)
    with caplog.at_level(logging.INFO, logger="lms"):
        bounded = lms.LMS(device_memory="150MiB", calibration_steps=0).plan_only(*args)
    assert not bounded.fits
    assert sum(s["pieces"] for s in bounded.splits if " are over " in s["why"]) <= sum(made) // 2
    assert "over the" in caplog.text and "lms.split.fit.MAX_LOOPED_PIECES" in caplog.text


def test_pieces_made_one_by_one_have_the_lower_cap():
    """A GPU's piece copies make every piece as ops of its own (no loops): MAX_PIECES bounds
    the graph; the emulated device's loop alike pieces, and only the step's cost per piece is
    left: MAX_LOOPED_PIECES."""
    from lms.device.copies import DevicePieces
    from lms.device.host_store import HostStore

    assert lms.split.fit.pieces_cap(HostStore().pieces()) == lms.split.fit.MAX_LOOPED_PIECES
    assert lms.split.fit.pieces_cap(DevicePieces()) == lms.split.fit.MAX_PIECES
    assert lms.split.fit.MAX_PIECES < lms.split.fit.MAX_LOOPED_PIECES
