"""Host description: what a comparison between hosts must show (MLPerf's system-description
fields as a checklist). Anything not known for sure is None, never guessed.

`describe_host()` imports TensorFlow, so the runner calls it in a child process
(`capture_host_description`): on a GPU host, TensorFlow in the parent would hold device memory
that the trials need.
"""

import json
import os
import platform
import socket
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
# Identifies the container image a run used; set by the container runner, None natively.
IMAGE_DIGEST_VARIABLE = "SUITE_IMAGE_DIGEST"
BUILD_INFO = "BUILD_INFO.json"  # the suite's commit, in an image (no .git there)


def _cpuinfo() -> list[dict]:
    """/proc/cpuinfo as one dict per processor block (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    blocks = []
    for block in text.strip().split("\n\n"):
        entry = {}
        for line in block.splitlines():
            key, _, value = line.partition(":")
            entry[key.strip()] = value.strip()
        blocks.append(entry)
    return blocks


def describe_cpu() -> dict:
    import psutil

    blocks = _cpuinfo()
    model = None
    for key in ("model name", "cpu", "Processor"):  # x86_64, ppc64le, some aarch64
        model = next((b[key] for b in blocks if b.get(key)), None)
        if model:
            break
    sockets = {b["physical id"] for b in blocks if "physical id" in b}
    return {
        "model": model,
        "sockets": len(sockets) or None,
        "cores": psutil.cpu_count(logical=False),
        "threads": psutil.cpu_count(logical=True),
    }


def describe_gpus() -> tuple[list[dict] | None, str | None]:
    """(GPUs, driver version) from NVML; (None, None) when NVML is absent: unknown, not zero."""
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception:  # no NVIDIA driver or library: nothing known from NVML
        return None, None
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            gpus.append(
                {
                    "model": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "link": _gpu_link(pynvml, handle),
                }
            )
        return gpus, _text(pynvml.nvmlSystemGetDriverVersion())
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu_link(pynvml, handle) -> dict:
    link = {"pcie_generation": None, "pcie_width": None, "nvlink_links": None}
    try:
        link["pcie_generation"] = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(handle)
        link["pcie_width"] = pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)
    except pynvml.NVMLError:
        pass
    active = 0
    try:
        for index in range(pynvml.NVML_NVLINK_MAX_LINKS):
            if pynvml.nvmlDeviceGetNvLinkState(handle, index) == pynvml.NVML_FEATURE_ENABLED:
                active += 1
        link["nvlink_links"] = active
    except pynvml.NVMLError:
        link["nvlink_links"] = active or None
    return link


def measure_host_device_bandwidth(size_bytes: int = 256 * 2**20) -> dict | None:
    """GPU only: GB/s of a host->device and a device->host copy of `size_bytes`. None without a
    GPU (on the CPU there is no link to measure)."""
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):
        return None

    def best_seconds(copy):
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            copy()
            best = min(best, time.perf_counter() - start)
        return best

    with tf.device("CPU:0"):
        host = tf.ones([size_bytes // 4], tf.float32)
    with tf.device("GPU:0"):
        device = tf.identity(host)

    def to_device():
        with tf.device("GPU:0"):
            tf.reduce_sum(tf.identity(host)).numpy()

    def to_host():
        with tf.device("CPU:0"):
            tf.identity(device).numpy()

    return {
        "host_to_device": size_bytes / best_seconds(to_device) / 1e9,
        "device_to_host": size_bytes / best_seconds(to_host) / 1e9,
    }


def suite_version() -> dict:
    """Version, commit and whether modified: from git, else from the image's BUILD_INFO.json."""
    try:
        version = metadata.version("lms-bench")
    except metadata.PackageNotFoundError:
        version = None
    commit = dirty = None
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = bool(status.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        info = REPO_ROOT / BUILD_INFO
        if info.exists():  # inside an image: written by `inv build`
            recorded = json.loads(info.read_text())
            commit, dirty = recorded.get("commit"), recorded.get("dirty")
    return {"version": version, "commit": commit, "dirty": dirty}


def describe_host() -> dict:
    """The full description of this host as the trials see it. Without TensorFlow (a ppc64le
    image lacking the Open-CE layer) its fields are null."""
    import psutil

    try:
        import tensorflow as tf
    except ImportError:
        tf = None
    build = tf.sysconfig.get_build_info() if tf else {}
    gpus, driver = describe_gpus()
    if gpus is None and tf and not tf.config.list_physical_devices("GPU"):
        gpus = []  # neither NVML nor TensorFlow sees a GPU: this host trains on its CPU
    try:
        import keras

        keras_version = keras.__version__
    except ImportError:
        keras_version = None
    return {
        "hostname": socket.gethostname(),
        "architecture": platform.machine(),
        "os": {"system": platform.system(), "kernel": platform.release()},
        "cpu": describe_cpu(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "gpu_count": None if gpus is None else len(gpus),
        "driver_version": driver,
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        "host_device_bandwidth_gbps": measure_host_device_bandwidth() if tf else None,
        "tensorflow_version": tf.__version__ if tf else None,
        "keras_version": keras_version,
        "python_version": platform.python_version(),
        "in_container": Path("/.dockerenv").exists(),
        "image_digest": os.environ.get(IMAGE_DIGEST_VARIABLE),
        "suite": suite_version(),
    }


def capture_host_description(timeout_s: float = 600) -> dict:
    """describe_host() run in a fresh process (see the module docstring)."""
    from suite.environment import child_environment

    env = child_environment()
    completed = subprocess.run(
        [sys.executable, "-m", "suite.hosts.description"],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout_s,
    )
    if completed.returncode != 0:
        from suite.errors import SuiteError

        raise SuiteError(f"host description failed: {completed.stderr.strip()[-1000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    print(json.dumps(describe_host(), sort_keys=True))
