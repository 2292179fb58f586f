"""The device a step runs on, worked out once: which swap and piece mechanism it takes, where its
compute and its host copies live, whose allocator the closed loop reads, which kernels the
simulator models and what caps the host memory.

Three kinds (`Options.mechanism`):

- "emulated" (`host-store`): the CPU with a memory budget; swaps go to a Python-side store
  (lms/device/host_store.py `HostStore`), so TensorFlow's allocator really drops and the loop
  measures it.
- "gpu" (`device-copy`): a GPU; swaps are TensorFlow copies to its host (`DeviceCopy`), gated on
  the host side; host copies come from the pinned allocator (capped by TF_GPU_HOST_MEM_LIMIT_IN_MB).
- "two-device": the GPU's mechanism run for real on a CPU: two logical CPU devices, the step's
  compute on the second, its host on the first. TensorFlow then partitions the step, inserts its
  send/recv pairs and runs Grappler exactly as between a GPU and its host (docs/lms.md, "The GPU
  path"). Both devices share the CPU's allocator, so nothing measures the compute device's own
  bytes: its plans are simulated only; the host memory is checked as on a GPU host.

`resolve_target` is the only place that asks whether a GPU is there; `describe_device` works out,
once per `LMS`, everything a plan needs of the device (`Device`).
"""

import os
from dataclasses import dataclass

import tensorflow as tf

from lms.device.host_memory import pinned_limit_bytes
from lms.errors import ParameterError
from lms.values.budget import budget_bytes

HOST_DEVICE = "/device:CPU:0"
TWO_DEVICE_COMPUTE = "/device:CPU:1"
TWO_DEVICE_HELP = (
    "mechanism 'two-device' computes on a second logical CPU device: call "
    "lms.use_two_devices() before TensorFlow runs anything (it configures /CPU:0 and /CPU:1)"
)


@dataclass(frozen=True)
class Target:
    """Where a step runs, as LMS plans for it (see the module docstring).

    compute_device: the device the step's ops run on ("/device:GPU:0", "/device:CPU:1"); on the
        emulated device the CPU: None (TensorFlow's default) where no GPU is seen, else
        "/device:CPU:0", so that a GPU host's emulated step does not compute on its GPU.
    meter_device: the allocator the closed loop reads ("GPU:0", "CPU:0"); None where it cannot
        read the compute device's own bytes (two-device).
    host_marker: ops whose device names this are host memory to the analysis (None: none are).
    """

    kind: str  # "emulated" | "gpu" | "two-device"
    compute_device: str | None
    host_device: str
    meter_device: str | None
    host_marker: str | None

    @property
    def device_copies(self) -> bool:
        """Whether swaps and pieces are TensorFlow copies between two devices (GPU, two-device),
        not the emulated device's host store."""
        return self.kind != "emulated"

    @property
    def emulated(self) -> bool:
        return self.kind == "emulated"

    @property
    def on_cpu(self) -> bool:
        """Whether the step computes with the CPU's kernels (emulated and two-device)."""
        return self.kind != "gpu"

    def kernels(self) -> str:
        """The kernel set whose temporaries the simulator counts (lms/graph/kernels.py)."""
        from lms.graph.cpu_host import cpu_kernels

        return cpu_kernels() if self.on_cpu else "gpu"

    def pinned_host_bytes(self) -> int | None:
        """The pinned host allocator's cap where host copies come from it (a GPU host, and the
        two-device mode standing in for one); None on the emulated device."""
        if self.emulated:
            return None
        return pinned_limit_bytes()

    def pool_bytes(self) -> int | None:
        """TensorFlow's memory pool of the compute device (its BFC allocator's `memory_limit`),
        the memory a plan may fill (not NVML's total: the pool is what was free at start minus
        what TensorFlow leaves to the system); None on the emulated device."""
        if self.emulated:
            return None
        return device_pool_bytes(self.compute_device)

    def growth(self) -> bool:
        """Whether the compute device's allocator grows by regions (a GPU with memory growth
        on; the CPU's allocator always does)."""
        if self.on_cpu:
            return True
        if os.environ.get("TF_FORCE_GPU_ALLOW_GROWTH", "").lower() == "true":
            return True
        index = tf.DeviceSpec.from_string(self.compute_device).device_index or 0
        gpus = tf.config.list_physical_devices("GPU")
        return index < len(gpus) and bool(tf.config.experimental.get_memory_growth(gpus[index]))


def resolve_target(mechanism: str = "auto", device: str | None = None) -> Target:
    """The target of `LMS(mechanism=..., device=...)`: "auto" is a GPU's copies where TensorFlow
    sees a GPU, else the emulated device."""
    gpus = tf.config.list_physical_devices("GPU")
    if mechanism == "auto":
        mechanism = "device-copy" if gpus else "host-store"
    if mechanism == "host-store":  # the CPU is the emulated device, on a GPU host too
        return Target("emulated", HOST_DEVICE if gpus else None, HOST_DEVICE, "CPU:0", None)
    if mechanism == "two-device":
        if len(tf.config.list_logical_devices("CPU")) < 2:
            raise ParameterError(TWO_DEVICE_HELP)
        compute = _canonical(device or TWO_DEVICE_COMPUTE)
        if compute == HOST_DEVICE:
            raise ParameterError(f"device must not be the host {HOST_DEVICE}; received {device!r}")
        return Target("two-device", compute, HOST_DEVICE, None, "CPU:0")
    compute = _canonical(device or "/device:GPU:0")
    spec = tf.DeviceSpec.from_string(compute)
    return Target("gpu", compute, HOST_DEVICE, f"GPU:{spec.device_index or 0}", "CPU")


@dataclass(frozen=True)
class Device:
    """The device a plan is for, worked out once from the options (`describe_device`).

    device_bytes: the device memory (the option, else the GPU's pool); budget_bytes: what a
    plan may fill (less the reserve, times the safety ratio); limit_bytes: what a measured peak
    is held to (less the reserve only); kernels: whose temporaries the simulator counts
    ("onednn", "eigen", "gpu"); growth: whether the device's allocator grows by regions (the
    allocator model's); pinned_host_bytes: the pinned host allocator's cap (GPU, two-device)."""

    target: Target
    device_bytes: int
    budget_bytes: int
    limit_bytes: int
    kernels: str
    growth: bool
    pinned_host_bytes: int | None

    def key(self, parameters, allocator: str | None) -> str:
        """What besides the graph a calibration holds for: device, memory, kernels, versions."""
        target = self.target
        return (
            f"{target.kind}:{target.compute_device}|{self.device_bytes}|{self.budget_bytes}|"
            f"{self.kernels}|tf{tf.__version__}|{parameters}|{allocator}"
        )


def describe_device(options) -> Device:
    """The `Device` of `lms.Options`: its target, memory and budget, kernels and allocator."""
    target = resolve_target(options.mechanism, options.device)
    device_bytes = options.device_bytes
    if device_bytes is None:  # the step's own GPU: TensorFlow's memory pool for it
        device_bytes = target.pool_bytes() if target.kind == "gpu" else None
        if device_bytes is None:
            raise ParameterError(
                "device_memory is required without a readable GPU (on the emulated device it "
                "is the memory budget), e.g. LMS(device_memory='2GiB')"
            )
    return Device(
        target=target,
        device_bytes=device_bytes,
        budget_bytes=budget_bytes(device_bytes, options.reserve, options.safety_ratio),
        limit_bytes=budget_bytes(device_bytes, options.reserve, 1.0),
        kernels=target.kernels(),
        growth=target.growth(),
        pinned_host_bytes=target.pinned_host_bytes(),
    )


def _canonical(device: str) -> str:
    """ "GPU:1", "/gpu:1", "/device:GPU:1" → "/device:GPU:1"."""
    text = device if device.startswith("/") else f"/device:{device}"
    spec = tf.DeviceSpec.from_string(text)
    if spec.device_type is None:
        raise ParameterError(f"device must name a device like 'GPU:0'; received {device!r}")
    return f"/device:{spec.device_type.upper()}:{spec.device_index or 0}"


def use_two_devices() -> None:
    """Split the CPU into two logical devices (/CPU:0 the host, /CPU:1 the compute device) for
    mechanism "two-device". Call it before TensorFlow runs anything; calling it again is fine."""
    cpu = tf.config.list_physical_devices("CPU")[0]
    configured = tf.config.get_logical_device_configuration(cpu)
    if configured and len(configured) >= 2:
        return
    try:
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration()] * 2
        )
    except RuntimeError as error:  # the runtime has started: too late
        raise ParameterError(f"{TWO_DEVICE_HELP} ({error})") from None


def device_pool_bytes(device: str) -> int | None:
    """TensorFlow's memory pool of `device` ("/device:GPU:0"): the memory_limit of the logical
    device configured on it (`tf.config.set_logical_device_configuration`), else the
    `memory_limit` TensorFlow's device list reports for it (what was free when TensorFlow
    started, less what it leaves to the system: what TFLMSv2 read too); None where it is not
    listed (a logical CPU device)."""
    from tensorflow.python.client import device_lib

    wanted = _canonical(device)
    spec = tf.DeviceSpec.from_string(wanted)
    physical = tf.config.list_physical_devices(spec.device_type)
    index = spec.device_index or 0
    if index < len(physical):
        configured = tf.config.get_logical_device_configuration(physical[index]) or []
        if len(configured) == 1 and getattr(configured[0], "memory_limit", None):
            return int(configured[0].memory_limit) * 2**20
    for found in device_lib.list_local_devices():
        if _canonical(found.name.rsplit("device:", 1)[-1]) == wanted:
            return int(found.memory_limit) or None
    return None


def is_host_out_of_memory(error: Exception) -> bool:
    """Whether a ResourceExhaustedError is the host's (the pinned allocator, or a CPU device of a
    step that computes elsewhere), not the compute device's: TensorFlow's OOM message names the
    device and the allocator ("... on /job:localhost/replica:0/task:0/device:CPU:0 by allocator
    gpu_host_bfc")."""
    text = str(error)
    return any(name in text for name in ("gpu_host_bfc", "cuda_host_bfc")) or (
        "device:CPU:0" in text and "OOM when allocating" in text
    )
