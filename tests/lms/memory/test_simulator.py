"""lms/memory/simulator.py (and lms/memory/lifetimes.py): the simulated peak falls with more
swapping, element-wise ops write into their input, the swap-only floor, and an ordered plan's
measured peak.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf
from lms_cases import Case, small_cnn

import lms

pytestmark = pytest.mark.compat
ROOT = Path(__file__).resolve().parents[3]


def test_simulated_peak_drops_with_more_swapping():
    case = Case(*small_cnn(resolution=64))
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    peaks = [
        lms.internal.simulate(
            analysis, lms.internal.plan(analysis, lms.Parameters(t, 1, 0))
        ).peak_bytes
        for t in (1, 4, 16)
    ]
    assert peaks[0] <= peaks[1] <= peaks[2] <= lms.internal.simulate(analysis).peak_bytes
    assert peaks[0] < lms.internal.simulate(analysis).peak_bytes


def test_an_element_wise_op_writes_into_its_input_when_it_is_the_last_reader():
    """TensorFlow forwards the buffer of an input whose last reader an element-wise kernel is:
    a chain of them holds one buffer, not two; an input read again later is not forwarded."""
    spec = tf.TensorSpec((256, 1024), tf.float32)
    size = 256 * 1024 * 4

    @tf.function
    def chain(x):
        return tf.reduce_sum(tf.exp(tf.nn.relu(x * 2.0)))

    @tf.function
    def reread(x):
        doubled = x * 2.0
        return tf.reduce_sum(tf.exp(tf.nn.relu(doubled))) + tf.reduce_sum(doubled)

    for function, buffers in ((chain, 1), (reread, 2)):
        analysis = lms.internal.analyze(function.get_concrete_function(spec).graph)
        simulation = lms.internal.simulate(analysis)
        held = simulation.peak_bytes - analysis.resident_bytes
        assert buffers * size <= held < buffers * size + 1024, function
        explained = lms.internal.explain_peak(analysis, simulation)
        assert explained["buffer_bytes"] + explained["next_op_in_flight_bytes"] == held


def test_the_swap_only_floor_is_an_ops_own_buffers_and_its_kernels_temporary():
    """`largest_footprint`: the step's inputs are resident, not the op's; an element-wise op
    writing into an input of its size holds two buffers, not three; a convolution's workspace
    counts; and no plan, not even everything swapped, simulates below floor + resident."""
    from lms.memory.lifetimes import largest_footprint

    size = 256 * 1024 * 4

    @tf.function
    def adds(x):
        return tf.reduce_sum((x * 2.0) + (x * 3.0))

    analysis = lms.internal.analyze(adds.get_concrete_function(tf.TensorSpec((256, 1024))).graph)
    floor = largest_footprint(analysis)
    assert analysis.ops[[o.name for o in analysis.ops].index(floor.name)].type == "AddV2"
    assert (floor.bytes, floor.temporary_bytes) == (2 * size, 0)
    assert analysis.largest_op[1] == 3 * size  # TFLMSv2's count: inputs + outputs

    @tf.function
    def conv(x, f):
        return tf.reduce_sum(tf.nn.conv2d(x, f, 1, "SAME"))

    specs = tf.TensorSpec((2, 64, 64, 16)), tf.TensorSpec((3, 3, 16, 16))
    analysis = lms.internal.analyze(conv.get_concrete_function(*specs).graph)
    output = 2 * 64 * 64 * 16 * 4
    # oneDNN's and cuDNN's workspace: about its largest tensor; Eigen's forward convolution
    # allocates outside TensorFlow, and its output's Sum (+ a 4-byte scalar) sets the floor
    for kernels, floor_bytes, temporary in (
        ("onednn", 2 * output, output),
        ("gpu", 2 * output, output),
        ("eigen", output + 4, 0),
    ):
        analysis.kernels = kernels
        floor = largest_footprint(analysis)
        assert (floor.bytes, floor.temporary_bytes) == (floor_bytes, temporary), kernels

    case = Case(*small_cnn(resolution=64))
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    floor = largest_footprint(analysis).bytes + analysis.resident_bytes
    for ordering in (0, 1):
        everything = lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=ordering))
        assert lms.internal.simulate(analysis, everything).peak_bytes >= floor, ordering
    # in the enforced order, everything swapped reaches it
    assert lms.internal.simulate(analysis, everything).peak_bytes <= 1.05 * floor


MEASURED_ORDER_CHILD = """
import json, keras, tensorflow as tf, lms
from lms.graph.cpu_host import cpu_kernels
from lms.device.rewriter import rewrite
from suite.workloads import WORKLOADS, build_workload, data, training

keras.utils.set_random_seed(0)
model, loss_fn = build_workload("resnet50", 768, 1)
info = WORKLOADS["resnet50"]
images, labels = data.synthetic_batch(info, 768, 1, info.default_classes)
step = training.make_train_step(model, loss_fn, keras.optimizers.SGD(1e-4, momentum=0.9), "fp32")
concrete = step.get_concrete_function(images, labels)
analysis = lms.internal.analyze(concrete.graph, paired_reads=lms.internal.cpu_paired_reads())
analysis.kernels = cpu_kernels()
plan = lms.internal.plan(analysis, lms.Parameters(28, 1, 3, ordering=1))
rewritten = rewrite(concrete, analysis, plan, lms.internal.HostStore())
float(rewritten(images, labels))
tf.config.experimental.reset_memory_stats("CPU:0")
for _ in range(2):
    float(rewritten(images, labels))
print(json.dumps({
    "measured": tf.config.experimental.get_memory_info("CPU:0")["peak"],
    "simulated": lms.internal.simulate(analysis, plan, lms.internal.BestFitAllocator).peak_bytes,
    "swaps": plan.swap_count,
}))
"""


@pytest.mark.kernels
def test_an_ordered_plan_measures_what_it_simulates():
    """With its swaps in the enforced order, a plan's measured peak is the simulated one (fresh
    process): ResNet50 768² b1 with the limit search's parameters measured 0.999x its simulated
    peak with oneDNN's kernels (343.6 of 344.1 MiB, two processes), 1.008x with Eigen's. With
    swap-ins triggered and swap-outs awaited by ops Grappler folds away (a Reshape, a Shape, a
    variable's handle), and the chain linked through them alone, 1.07x and 1.11x (1.18x at
    1024²); with folded ops taken for anchors and neither anchor links nor swap-in waits, 1.22x.
    Issue 43's order at first measured 1.18x (Eigen) and 1.04x (oneDNN): chained constants made
    Grappler cycles (it then skipped its arithmetic and dependency optimizers), and swap-ins
    allocated before the swap-outs simulated to go first; with both mended 1.006x and 0.972x."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    completed = subprocess.run(
        [sys.executable, "-c", MEASURED_ORDER_CHILD],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["swaps"] > 100
    ratio = result["measured"] / result["simulated"]
    assert 0.9 <= ratio <= 1.05, result  # (TF 2.14's Keras 2 graph: 0.949-0.976, 179 swaps)
