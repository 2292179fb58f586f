"""lms/api.py (LMS): device memory required on the emulated device, a graph that needs no LMS,
a budget nothing meets, the Eigen kernels' warning, the measured peak of an auto-tuned plan, the
Keras callback, one step wrapped twice, the paired reads dropped when nothing fits.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import logging
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from lms_cases import Case, run_child, small_cnn
from lms_equivalence import (
    FP32_TOLERANCE,
    aggressive,
    assert_same_updates,
    unet_case,
    update_mismatches,
)

import lms

pytestmark = pytest.mark.compat


def test_device_memory_is_required_on_the_emulated_device():
    with pytest.raises(lms.ParameterError, match="device_memory is required"):
        lms.LMS()


def test_a_graph_that_needs_no_lms_runs_unchanged(caplog):
    case = Case(*small_cnn(resolution=32))
    planner = lms.LMS(device_memory="64GiB")
    wrapped = planner.wrap(case.step)
    with caplog.at_level(logging.INFO, logger="lms"):
        assert_same_updates(case, wrapped)
    assert planner.report.lms_needed is False and planner.report.swapped_bytes == 0
    assert "LMS is not necessary" in caplog.text


def test_a_budget_nothing_can_meet_is_a_clear_error():
    case = Case(*small_cnn())
    # swapping alone (with splitting, "auto", this budget is met: tests/lms/split/test_split.py)
    planner = lms.LMS(device_memory="4MiB", calibration_steps=0, split="off")
    with pytest.raises(lms.NothingFitsError) as raised:
        planner.wrap(case.step)(case.images, case.labels)
    message = str(raised.value)
    assert message.startswith("no LMS parameters fit the budget of 3.60 MiB: the best simulated")
    assert "largest operation" in message and "safety_ratio 0.9" in message
    assert "no swapping gets under" in message  # the floor: its op, temporary and resident
    with pytest.raises(lms.NothingFitsError, match="budget of 100 B: .* KiB") as raised:
        lms.LMS(device_memory="100B", safety_ratio=1.0, calibration_steps=0).wrap(case.step)(
            case.images, case.labels
        )
    assert "safety_ratio" not in str(raised.value)
    assert "splitting cannot help: the resident" in str(raised.value)  # "auto" said why not
    # with the closed loop the closest plan is run and measured before the size is given up
    step = lms.LMS(device_memory="4MiB", split="off").wrap(case.step)
    with pytest.raises(lms.NothingFitsError) as raised:
        for _ in range(12):  # plans, their unmeasured first runs, the plan that swaps the most
            step(case.images, case.labels)
    message = str(raised.value)
    assert message.startswith("no LMS plan kept the measured peak under the device memory of")
    assert "planned for 3.60 MiB" in message and ", measured " in message
    assert "In simulation: no LMS parameters fit" in message and "largest operation" in message


@pytest.mark.parametrize("onednn", ["0", "1"])
def test_lms_warns_when_the_cpu_kernels_are_eigens_whose_temporaries_it_does_not_model(onednn):
    """Seen on the aarch64 image under qemu (TensorFlow enables oneDNN only on some Arm CPUs):
    with Eigen's convolutions the measured peak was 1.8x the simulated one. Real processes with
    TF_ENABLE_ONEDNN_OPTS off and on; the warning only where the simulator's model does not hold."""
    code = (
        "import tensorflow as tf, keras, lms\n"
        "model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3),\n"
        "                          keras.layers.Flatten(), keras.layers.Dense(2)])\n"
        "optimizer = keras.optimizers.SGD()\n"
        "@tf.function\n"
        "def step(x, y):\n"
        "    with tf.GradientTape() as tape:\n"
        "        loss = tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(\n"
        "            y, model(x), from_logits=True))\n"
        "    grads = tape.gradient(loss, model.trainable_variables)\n"
        "    optimizer.apply_gradients(zip(grads, model.trainable_variables))\n"
        "    return loss\n"
        "x, y = tf.zeros([2, 16, 16, 3]), tf.zeros([2], tf.int32)\n"
        "lms.LMS(device_memory='64GiB').wrap(step)(x, y)\n"
        "print(lms.internal.onednn_enabled())\n"
    )
    env = {**os.environ, "TF_ENABLE_ONEDNN_OPTS": onednn}
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert completed.stdout.strip().splitlines()[-1] == str(onednn == "1")
    warned = "computes on the CPU with Eigen's kernels" in completed.stderr
    assert warned == (onednn == "0"), completed.stderr[-2000:]


@pytest.mark.kernels
def test_auto_tuned_plan_fits_the_budget_simulated_and_measured(tmp_path):
    """In a fresh process (tests/support/_lms_measure.py), so that the allocator's peak is this
    step's; its report comes back as the JSON a record holds."""
    completed, result = run_child("_lms_measure.py", str(tmp_path / "memory.png"))
    report, device_memory = lms.PlanReport.from_dict(result["report"]), result["device_memory"]
    assert report.lms_needed and report.swapped_bytes > 0
    assert result["budget"] < device_memory
    # the plan fits as simulated, or (the allocator's padding depends on the heap's history: TF
    # 2.14 pads this small CNN's fresh heap more than the warm one it runs in) it says so
    fits = report.peak_bytes_with_lms <= report.planned_budget_bytes <= result["budget"]
    assert fits == report.fits
    assert fits or "over the budget" in completed.stderr and "keeping it" in completed.stderr
    assert result["measured"] <= device_memory < result["plain"]
    assert "Found swapout_threshold=" in completed.stderr and "Added " in completed.stderr
    assert (tmp_path / "memory.png").read_bytes().startswith(b"\x89PNG")
    # the auto-tuned plan (default arithmetic settings) makes the same updates as plain training
    rtol, floor = FP32_TOLERANCE
    (loss, momentums), (want_loss, want_momentums) = result["update_lms"], result["update_plain"]
    assert loss == pytest.approx(want_loss, rel=rtol)
    got, want = ([np.array(m) for m in x] for x in (momentums, want_momentums))
    assert not update_mismatches(got, want, rtol, floor)


def test_keras_fit_with_the_lms_callback_matches_plain_fit():
    model, _, images, labels = small_cnn(resolution=128, batch=8, layers=5)
    dataset = tf.data.Dataset.from_tensors((images, labels)).repeat(3)
    initial = [v.numpy() for v in model.variables]

    def fit(callbacks):
        for variable, value in zip(model.variables, initial, strict=True):
            variable.assign(value)
        model.compile(
            optimizer=keras.optimizers.SGD(0.01),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        losses = model.fit(dataset, epochs=2, verbose=0, callbacks=callbacks).history["loss"]
        moved = [
            v.numpy().astype(np.float64) - i.astype(np.float64)
            for v, i in zip(model.variables, initial, strict=True)
        ]
        return losses, moved

    plain, plain_moved = fit([])
    callback = lms.LMS(device_memory="1TiB", swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)
    with_lms, lms_moved = fit([callback])
    np.testing.assert_allclose(with_lms, plain, rtol=1e-5)
    # what six steps moved every weight by (1e-3 of a weight: its float32 rounding stays below
    # 1e-4 of the movement)
    assert not update_mismatches(lms_moved, plain_moved, *FP32_TOLERANCE)
    assert callback.report.swapped_tensors > 0


def test_one_step_wrapped_twice_is_planned_from_its_plain_trace_both_times():
    """The rewrite edits a trace in place; a second LMS object wrapping the same step must not
    plan on top of the first one's swaps and order."""
    case = Case(*small_cnn(resolution=48, batch=2))
    reports = []
    for _ in range(2):
        planner = aggressive()
        wrapped = planner.wrap(case.step)
        wrapped.prepare(case.images, case.labels)
        reports.append(planner.report)
        float(wrapped(case.images, case.labels))
    first, second = reports
    assert first.swapped_tensors > 0
    assert second.analysis.vertices == first.analysis.vertices
    assert second.swapped_tensors == first.swapped_tensors


@pytest.mark.kernels
def test_max_pool_outputs_are_recomputed_when_nothing_fits_without(caplog):
    """Kept on the device for speed, oneDNN's paired pool outputs are still a lever: a budget
    only freeing them meets gets a plan whose pool gradients read their pools recomputed
    (lms/graph/pool_reads.py), still paired (oneDNN's kernel), not a swap-in."""
    from lms.graph.step import ONEDNN_PAIRED_READS

    if not lms.internal.cpu_paired_reads():
        pytest.skip("oneDNN is off: nothing is paired")
    case = unet_case()
    graph = case.step.get_concrete_function(case.images, case.labels).graph
    everything = lms.Parameters(1, 1, 0, ordering=1)
    lowest = {}
    for name, reads in (("paired", ONEDNN_PAIRED_READS), ("free", frozenset())):
        analysis = lms.internal.analyze(graph, paired_reads=reads)
        lowest[name] = lms.internal.simulate(
            analysis, lms.internal.plan(analysis, everything)
        ).peak_bytes
    assert lowest["free"] < lowest["paired"]
    planner = lms.LMS(
        device_memory=(lowest["free"] + lowest["paired"]) // 2,
        safety_ratio=1.0,
        allocator=None,
        ordering=1,
    )
    with caplog.at_level(logging.INFO, logger="lms"):
        callable_, _ = planner.wrap(case.step).prepare(case.images, case.labels)
    assert "planning again with each gradient reading its pool recomputed" in caplog.text
    assert planner.report.fits
    gradients = [op for op in callable_.graph.get_operations() if op.type == "MaxPool3DGrad"]
    assert gradients
    for op in gradients:
        assert op.inputs[1].op.type == "MaxPool3D" and op.inputs[1].op.name.startswith("lms_pool/")
