"""lms/graph/kernels.py: the temporaries of oneDNN's and Eigen's CPU kernels, against what
TensorFlow's allocator shows in fresh processes with TF_ENABLE_ONEDNN_OPTS=0 and =1 (both in every
run, whichever kernels this CPU gets by default), and the simulator's use of them.

Tests marked `kernels` depend on the kernel set this process computes with; `inv test` runs them
a second time with TF_ENABLE_ONEDNN_OPTS flipped."""

import numpy as np
import pytest
import tensorflow as tf
from lms_cases import run_child as lms_run_child

import lms
from lms.graph import cpu_host, kernels

MIB = 2**20
FLAGS = {"eigen": "0", "onednn": "1"}


def run_child(script: str, onednn: str, *args) -> dict:
    """tests/`script` in a fresh process on the emulated device with TF_ENABLE_ONEDNN_OPTS set:
    the JSON of its last line."""
    return lms_run_child(script, *args, extra_env={"TF_ENABLE_ONEDNN_OPTS": onednn})[1]


# (rule, input and output shapes, bytes per element, intra-op threads, Eigen's L3 bytes) and
# the temporary TensorFlow allocated for it on this machine (profiler traces, TF 2.21, Eigen's
# kernels; the col buffer's shape in the comment). Eigen read a 320 MiB L3 here.
L3_HERE = 320 * MIB
MEASURED = [
    # 1x1 64->64 over 4x48x48: a 27-image shard for 4 images, [27, 2304, 64]
    ("Conv2DBackpropFilter", [[4, 48, 48, 64], [4], [4, 48, 48, 64], [1, 1, 64, 64]], 4, 2, 0,
     15_925_248),
    # 3x3 over 2x112x112x64: one image fills the 30 MiB, [1, 12544, 576]
    ("Conv2DBackpropFilter", [[2, 112, 112, 64], [4], [2, 112, 112, 64], [3, 3, 64, 64]], 4, 2,
     0, 28_901_376),
    # half: the same 30 MiB in twice the elements, [39, 576, 576]
    ("Conv2DBackpropFilter", [[4, 24, 24, 64], [4], [4, 24, 24, 64], [3, 3, 64, 64]], 2, 2, 0,
     25_878_528),
    # an input gradient contracts one image at a time when each thread gets 256 KiB of work:
    # [1, 576, 576] with 2 threads, [20, 576, 576] with 8
    ("Conv2DBackpropInput", [[4], [3, 3, 64, 64], [4, 24, 24, 64], [4, 24, 24, 64]], 4, 2, 0,
     1_327_104),
    ("Conv2DBackpropInput", [[4], [3, 3, 64, 64], [4, 24, 24, 64], [4, 24, 24, 64]], 4, 8, 0,
     26_542_080),
    ("Conv2DBackpropInput", [[4], [3, 3, 64, 64], [4, 24, 24, 64], [4, 24, 24, 64]], 2, 8, 0,
     25_878_528),
    # 8x8 images: 265-image shards whatever the threads, [265, 64, 288]
    ("Conv2DBackpropInput", [[4], [3, 3, 32, 32], [8, 8, 8, 32], [8, 8, 8, 32]], 4, 1, 0,
     19_537_920),
    # batch 1: one volume, [1, 13824, 864]
    ("Conv3DBackpropInputV2", [[5], [3, 3, 3, 32, 32], [1, 24, 24, 24, 32], [1, 24, 24, 24, 32]],
     4, 2, L3_HERE, 47_775_744),
    # batch 8: a shard of L3 / work = 118 volumes, [118, 4096, 108], 100x the tensors' bytes
    ("Conv3DBackpropInputV2", [[5], [3, 3, 3, 4, 64], [8, 16, 16, 16, 64], [8, 16, 16, 16, 4]],
     4, 2, L3_HERE, 208_797_696),
    ("Conv3DBackpropFilterV2", [[8, 16, 16, 16, 4], [5], [8, 16, 16, 16, 64], [3, 3, 3, 4, 64]],
     4, 2, L3_HERE, 208_797_696),
    # over 25x its tensors' elements: Eigen's own kernel, nothing through TensorFlow
    ("Conv3DBackpropInputV2", [[5], [3, 3, 3, 16, 16], [2, 16, 16, 16, 16], [2, 16, 16, 16, 16]],
     4, 2, L3_HERE, 0),
    ("Conv3DBackpropFilterV2", [[1, 32, 32, 32, 8], [5], [1, 32, 32, 32, 32], [3, 3, 3, 8, 32]],
     4, 2, L3_HERE, 0),
    ("Conv3DBackpropFilterV2", [[1, 32, 32, 32, 8], [5], [1, 32, 32, 32, 32], [3, 3, 3, 8, 32]],
     2, 2, L3_HERE, 0),
    # the pool recomputed: 4x24x24x32 floats and as many int64 indices
    ("MaxPoolGrad", [[4, 48, 48, 32], [4, 24, 24, 32], [4, 24, 24, 32], [4, 48, 48, 32]], 4, 2,
     0, 884_736),
]  # fmt: skip


@pytest.mark.parametrize("rule, shapes, itemsize, threads, l3, measured", MEASURED)
def test_eigen_rules_give_the_temporaries_measured(rule, shapes, itemsize, threads, l3, measured):
    assert kernels.EIGEN_RULES[rule](shapes, itemsize, threads, l3) == measured


def test_the_l3_size_is_taken_from_the_probe_interval():
    """The probe's shard pins the L3 size to an interval of PROBE_WORK * 2 bytes; a multiple of
    256 KiB in it is the size (320 MiB here: an 81881-element half col buffer)."""
    shapes = [[5], [1, 1, 1, 1, 1024], [8, 1, 1, 1, 1024], [8, 1, 1, 1, 1]]
    held = kernels.EIGEN_RULES["Conv3DBackpropInputV2"](shapes, 2, 2, L3_HERE)
    shard = held // cpu_host.PROBE_ITEMSIZE
    assert shard == 81881
    step = cpu_host.PROBE_WORK * cpu_host.PROBE_ITEMSIZE
    high, low = shard * step, (shard - 1) * step
    assert low < L3_HERE <= high
    assert high // cpu_host.L3_GRANULE * cpu_host.L3_GRANULE == L3_HERE


@pytest.mark.parametrize("kernel_set", FLAGS)
def test_the_modelled_temporaries_are_the_ones_tensorflow_allocates(kernel_set):
    """Every op modelled with Eigen's rules holds exactly the bytes modelled (a temporary or
    none); under oneDNN, half-precision convolutions run Eigen's kernels on CPUs without
    AVX512-FP16 (this one), and oneDNN's float ones hold no more than the "onednn" model says."""
    result = run_child("_kernel_temps.py", FLAGS[kernel_set])
    assert result["kernels"] == kernel_set
    ops = result["ops"]
    eigen = {name: op for name, op in ops.items() if op["eigen"]}
    for name, op in eigen.items():
        assert op["measured"] == op["modelled"], (name, op)
    # an unpaired max pool gradient is TensorFlow's own kernel with both kernel sets
    assert "max_pool_grad" in eigen and eigen["max_pool_grad"]["measured"] > 0
    half = {name for name in ops if name.startswith("half_")}
    if kernel_set == "eigen":
        assert set(eigen) == set(ops)
        assert sum(op["measured"] > 0 for op in eigen.values()) >= 10
        assert result["l3"] >= 2 * MIB
        # a Conv3D col buffer sized by the L3 cache (its shard: L3 / 37 KiB volumes), and, with
        # an L3 over 7.3 MiB, one that exceeds 25x its tensors and falls back to Eigen's kernel
        assert eigen["volume_filter"]["measured"] > 0
        if result["l3"] > 7.3 * MIB:
            assert eigen["volume_filter_fallback"]["measured"] == 0
    else:
        assert (set(eigen) >= half) != result["half_on_onednn"]
        others = {name: op for name, op in ops.items() if not op["eigen"]}
        assert len(others) >= 10
        for name, op in others.items():
            assert op["measured"] <= op["modelled"], (name, op)
    for name, op in ops.items():  # forward convolutions: Eigen's buffers come from malloc
        if name.endswith("_forward") and op["eigen"]:
            assert op["measured"] == 0


# (workload, resolution, batch, mode): a plain step and one with everything swapped in the
# enforced order, 2D and 3D. Measured errors (simulated - measured, % of measured): Eigen +4.2,
# -6.6, -6.9, +0.1; oneDNN -10.7, -3.6, +16.4, -2.5. Without Eigen's temporaries modelled, the
# Eigen runs were 22-52 % under.
STEPS = [
    ("googlenet", "64", "2", "plain"),
    ("googlenet", "64", "2", "all"),
    ("unet3d", "16", "1", "plain"),
    ("unet3d", "16", "1", "all"),
]


@pytest.mark.slow
@pytest.mark.parametrize("kernel_set", FLAGS)
@pytest.mark.parametrize("workload, resolution, batch, mode", STEPS)
def test_simulated_step_peaks_are_near_the_measured_ones(
    workload, resolution, batch, mode, kernel_set
):
    result = run_child("_kernel_step.py", FLAGS[kernel_set], workload, resolution, batch, mode)
    assert result["kernels"] == kernel_set
    measured = result["measured"]
    assert abs(result["simulated"] - measured) <= 0.2 * measured, result


def conv_step():
    """A three-convolution training step over 4x32x32x16 inputs, and its input's spec."""
    layers = [tf.Variable(tf.random.normal([3, 3, 16, 16]) * 0.1) for _ in range(3)]

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            y = x
            for w in layers:
                y = tf.nn.relu(tf.nn.conv2d(y, w, 1, "SAME"))
            loss = tf.reduce_sum(y)
        for w, g in zip(layers, tape.gradient(loss, layers), strict=True):
            w.assign_sub(0.01 * g)
        return loss

    return step, tf.TensorSpec([4, 32, 32, 16])


def test_the_simulator_counts_the_kernel_sets_temporaries():
    """The default is the oneDNN model (a convolution holds its largest tensor). Eigen's filter
    gradients hold a ~30 MiB col buffer each, and in TensorFlow's free order the next op's beside
    the running one's; in an enforced order only the running one's. The explanation's parts add
    up to the peak either way."""
    step, spec = conv_step()
    analysis = lms.internal.analyze(step.get_concrete_function(spec).graph, quiet=True)
    assert analysis.kernels == "onednn"
    onednn = kernels.temporaries(analysis, "onednn")
    for index, op in enumerate(analysis.ops):
        if op.type in kernels.WORKSPACE_OPS and op.runs:
            largest = max(analysis.tensors[analysis.tensors[t].buffer].bytes for t in op.outputs)
            assert onednn.bytes[index] >= largest > 0
    assert not any(onednn.side_by_side)
    baseline = lms.internal.simulate(analysis)
    analysis.kernels = "eigen"
    eigen = kernels.temporaries(analysis, "eigen")
    filters = [i for i, op in enumerate(analysis.ops) if op.type == "Conv2DBackpropFilter"]
    assert len(filters) == 3
    assert all(25 * MIB < eigen.bytes[i] <= 30 * MIB for i in filters)
    free = lms.internal.simulate(analysis)
    ordered = lms.internal.simulate(
        analysis, lms.internal.plan(analysis, lms.Parameters(1, 1, 0, ordering=1))
    )
    assert free.peak_bytes > baseline.peak_bytes + 25 * MIB
    explained = lms.internal.explain_peak(analysis, free)
    # side by side: at the peak a filter gradient's buffer is in flight beside the running input
    # gradient's one-image buffer
    assert explained["running_op"].endswith("Conv2DBackpropInput")
    assert 0 < explained["kernel_temporary_bytes"] < MIB
    assert explained["next_op_in_flight_bytes"] >= 25 * MIB
    parts = ("resident_bytes", "buffer_bytes", "kernel_temporary_bytes")
    parts += ("next_op_in_flight_bytes",)
    assert sum(explained[p] for p in parts) == free.peak_bytes
    chained = lms.internal.explain_peak(analysis, ordered, None)
    assert chained["next_op_in_flight_bytes"] < 25 * MIB
    assert ordered.peak_bytes < free.peak_bytes
    # the allocator's replay places both buffers of two ops in flight
    padded = lms.internal.simulate(analysis, None, lms.internal.BestFitAllocator)
    assert padded.peak_bytes >= free.peak_bytes
    with pytest.raises(ValueError, match="kernels must be one of"):
        kernels.temporaries(analysis, "cudnn")
    analysis.kernels = "gpu"
    assert np.array_equal(lms.internal.simulate(analysis).device, baseline.device)


@pytest.mark.kernels
def test_lms_plans_with_the_kernels_this_process_computes_with():
    """On the emulated device LMS simulates with this TensorFlow's CPU kernels
    (TF_ENABLE_ONEDNN_OPTS, or the CPU's default): its plain peak is the simulation with them,
    not with the others."""
    step, spec = conv_step()
    report = lms.LMS(device_memory="64GiB").plan_only(step, spec)
    analysis = lms.internal.analyze(step.get_concrete_function(spec).graph, quiet=True)
    peaks = {}
    for kernel_set in ("onednn", "eigen"):
        analysis.kernels = kernel_set
        peaks[kernel_set] = lms.internal.simulate(
            analysis, None, lms.internal.BestFitAllocator
        ).peak_bytes
    assert peaks["eigen"] > peaks["onednn"] + 25 * MIB
    assert report.peak_bytes_without_lms == peaks[cpu_host.cpu_kernels()]
