"""lms/device/target.py: the device a step runs on, worked out once. What only a GPU has (a GPU
seen by TensorFlow) is stood in for by a GPU physical device in `list_physical_devices`; the
two-device
mode, its budgets and its pinned cap run for real in a fresh process."""

import os

import pytest
import tensorflow as tf
from lms_cases import run_child

import lms
from lms import _tf_private
from lms.device.host_memory import check_host_memory, pinned_limit_bytes
from lms.device.target import is_host_out_of_memory, resolve_target
from lms.errors import HostMemoryError, ParameterError

MiB = 2**20


def test_the_test_session_hides_gpus_so_auto_is_the_emulated_device():
    """On a GPU host the tests would otherwise take the GPU's mechanism unasked
    (tests/conftest.py): this session and its child processes see no GPU."""
    assert os.environ["CUDA_VISIBLE_DEVICES"] == ""
    target = resolve_target("auto")
    assert (target.kind, target.meter_device, target.compute_device) == ("emulated", "CPU:0", None)
    assert lms.LMS("64MiB").target.kind == "emulated"


def _seeing_a_gpu(monkeypatch):
    seen = tf.config.list_physical_devices

    def with_gpu(device_type=None):
        gpu = tf.config.PhysicalDevice("/physical_device:GPU:0", "GPU")
        return [gpu] if device_type == "GPU" else seen(device_type)

    monkeypatch.setattr(tf.config, "list_physical_devices", with_gpu)


def test_where_tensorflow_sees_a_gpu_auto_takes_its_copies_its_pool_and_its_meter(monkeypatch):
    _seeing_a_gpu(monkeypatch)
    target = resolve_target("auto")
    assert target.kind == "gpu" and target.device_copies and not target.on_cpu
    assert (target.compute_device, target.meter_device) == ("/device:GPU:0", "GPU:0")
    assert target.kernels() == "gpu" and target.host_marker == "CPU"
    other = resolve_target("auto", "gpu:1")  # the step's own GPU, not a hard-coded GPU:0
    assert (other.compute_device, other.meter_device) == ("/device:GPU:1", "GPU:1")
    assert target.pinned_host_bytes() == pinned_limit_bytes()
    emulated = resolve_target("host-store")  # on a GPU host: the CPU computes, and is measured
    assert (emulated.compute_device, emulated.meter_device) == ("/device:CPU:0", "CPU:0")


def test_the_emulated_device_is_chosen_explicitly_too():
    target = resolve_target("host-store")
    assert target.emulated and not target.device_copies and target.pinned_host_bytes() is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"device": "GPU:1", "mechanism": "host-store"}, "device names the device"),
        ({"device": 3}, "device names the device"),
        ({"mechanism": "gpu"}, "two-device"),
        ({"mechanism": "two-device", "link": {"bandwidth": "16GB/s"}}, "link emulates"),
    ],
)
def test_bad_targets_get_one_clear_error(kwargs, message):
    with pytest.raises(ParameterError, match=message):
        lms.check_options("64MiB", **kwargs)


def test_two_devices_cannot_be_made_once_tensorflow_runs():
    tf.constant(1.0) + 1.0  # noqa: B018 (the runtime is up)
    with pytest.raises(ParameterError, match="use_two_devices"):
        resolve_target("two-device")
    with pytest.raises(ParameterError, match="before TensorFlow runs anything"):
        lms.use_two_devices()


def test_the_pinned_cap_is_the_host_budget_when_smaller_and_says_how_to_raise_it(monkeypatch):
    monkeypatch.setenv("TF_GPU_HOST_MEM_LIMIT_IN_MB", "100")
    assert pinned_limit_bytes() == 100 * MiB
    check_host_memory(70 * MiB, 0, False, 2**40, pinned=pinned_limit_bytes())  # 1.3 x 70 < 100
    with pytest.raises(HostMemoryError, match="TF_GPU_HOST_MEM_LIMIT_IN_MB") as raised:
        check_host_memory(80 * MiB, 0, False, 2**40, pinned=pinned_limit_bytes())
    assert raised.value.available == 100 * MiB
    with pytest.raises(HostMemoryError, match="given") as raised:  # the host is the smaller
        check_host_memory(80 * MiB, 0, False, 50 * MiB, pinned=pinned_limit_bytes())
    assert raised.value.available == 50 * MiB
    monkeypatch.delenv("TF_GPU_HOST_MEM_LIMIT_IN_MB")
    assert pinned_limit_bytes() == 64 * 2**30  # TensorFlow's default


def test_a_host_out_of_memory_is_told_from_the_devices():
    """A real OOM of this process's CPU allocator (4 TiB asked), and the GPU's wording."""
    with pytest.raises(tf.errors.ResourceExhaustedError) as raised, tf.device("/CPU:0"):
        tf.zeros((2**40,), tf.float32)
    assert "device:CPU:0" in str(raised.value)
    assert is_host_out_of_memory(raised.value)
    gpu = tf.errors.ResourceExhaustedError(
        None,
        None,
        "OOM when allocating tensor with shape[64,256,256] and type float on "
        "/job:localhost/replica:0/task:0/device:GPU:0 by allocator GPU_0_bfc",
    )
    pinned = tf.errors.ResourceExhaustedError(
        None,
        None,
        "OOM when allocating tensor with shape[64,256,256] and type float on "
        "/job:localhost/replica:0/task:0/device:CPU:0 by allocator gpu_host_bfc",
    )
    assert not is_host_out_of_memory(gpu) and is_host_out_of_memory(pinned)


def test_lms_steps_run_without_grapplers_swapping_and_layout_passes():
    """The config of an LMS step's call: the memory optimizer's scheduling stays, its swapping
    goes; the layout optimizer is off; what the user set stays (here: the arithmetic optimizer
    off); the call options are restored after."""
    from tensorflow.core.protobuf import rewriter_config_pb2

    rewriter = rewriter_config_pb2.RewriterConfig
    saved = tf.config.optimizer.get_experimental_options()
    tf.config.optimizer.set_experimental_options({"arithmetic_optimization": False})
    try:
        before = _tf_private.default_call_config()
        with _tf_private.lms_call_options():
            inside = _tf_private.default_call_config()
        assert _tf_private.default_call_config() == before
    finally:
        tf.config.optimizer.set_experimental_options(
            {"arithmetic_optimization": saved.get("arithmetic_optimization", True)}
        )
    config = tf.compat.v1.ConfigProto.FromString(inside)
    rewrite = config.graph_options.rewrite_options
    assert rewrite.memory_optimization == rewriter.SCHEDULING_HEURISTICS
    assert rewrite.layout_optimizer == rewriter.OFF
    assert rewrite.arithmetic_optimization == rewriter.OFF


def test_the_two_device_mode_computes_on_the_second_device_and_caps_the_host_as_a_gpu_does():
    _, found = run_child("_two_device_budget.py", extra_env={"TF_GPU_HOST_MEM_LIMIT_IN_MB": "1"})
    assert (found["kind"], found["compute"], found["meter"]) == (
        "two-device",
        "/device:CPU:1",
        None,
    )
    # TensorFlow's memory_limit of a device, found by its name; a logical CPU device has none
    assert found["pool"]["CPU:0"] > 0 and found["pool"]["CPU:1"] is None
    assert found["pinned"] == MiB
    assert found["host_peak"] > MiB  # so the checked plan is over the 1 MB cap ...
    assert "TF_GPU_HOST_MEM_LIMIT_IN_MB" in found["raised"]  # ... and raised before running
    assert "CPU:1" in found["ran_on"] and "CPU:0" in found["ran_on"]


def test_an_xla_compiled_step_is_refused_in_one_line():
    @tf.function(jit_compile=True)
    def step(x):
        return tf.reduce_sum(x * x)

    with pytest.raises(ParameterError, match="jit_compile"):
        lms.LMS("64MiB").wrap(step)
    lms.LMS("64MiB").wrap(tf.function(step.python_function))  # without XLA: taken
