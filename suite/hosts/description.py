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
from importlib import metadata
from pathlib import Path

from suite.hosts.link import describe_link, gpu_topology

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


# /proc/cpuinfo keys only an x86 kernel writes; qemu-user passes the host's file through
X86_CPUINFO_KEYS = ("vendor_id", "flags")


def detect_emulation() -> str | None:
    """How this process's architecture is emulated, or None when it runs natively. Under
    qemu-user (a foreign image on binfmt_misc) the kernel is the host's: /proc/cpuinfo then
    describes an x86_64 processor while Python reports aarch64 or ppc64le. Rates measured so
    say how fast the emulator is, not the architecture."""
    machine = platform.machine()
    if machine in ("x86_64", "i686", "AMD64"):
        return None
    blocks = _cpuinfo()
    if any(key in block for block in blocks for key in X86_CPUINFO_KEYS):
        model = next((b.get("model name") for b in blocks if b.get("model name")), "x86_64")
        return f"qemu-user: {machine} on an x86_64 kernel ({model})"
    return None


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
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        for handle in handles:
            gpus.append(
                {
                    "model": _text(pynvml.nvmlDeviceGetName(handle)),
                    "memory_bytes": int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    "link": gpu_topology(pynvml, handle, handles),
                }
            )
        return gpus, _text(pynvml.nvmlSystemGetDriverVersion())
    finally:
        pynvml.nvmlShutdown()


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


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


def _cpu_kernels() -> str:
    import lms

    return "oneDNN" if lms.cpu_kernels() == "onednn" else "Eigen"


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
    description = {
        "hostname": socket.gethostname(),
        "architecture": platform.machine(),
        "emulation": detect_emulation(),  # None: native
        "os": {"system": platform.system(), "kernel": platform.release()},
        "cpu": describe_cpu(),
        "memory_bytes": psutil.virtual_memory().total,
        "gpus": gpus,
        "gpu_count": None if gpus is None else len(gpus),
        "driver_version": driver,
        "cuda_version": build.get("cuda_version"),
        "cudnn_version": build.get("cudnn_version"),
        # copy bandwidth per size: host memory, and each GPU's link as TensorFlow copies
        "link": describe_link(len(tf.config.list_physical_devices("GPU")) if tf else 0),
        "tensorflow_version": tf.__version__ if tf else None,
        # which CPU kernels train: oneDNN's (x86_64; aarch64 on the Neoverse CPUs TensorFlow
        # enables it for) or Eigen's (aarch64 elsewhere, qemu's included; TF_ENABLE_ONEDNN_OPTS=0).
        # Their convolutions hold different temporaries: peaks differ between the two.
        "cpu_kernels": _cpu_kernels() if tf else None,
        "keras_version": keras_version,
        "python_version": platform.python_version(),
        "in_container": Path("/.dockerenv").exists(),
        "image_digest": os.environ.get(IMAGE_DIGEST_VARIABLE),
        "suite": suite_version(),
    }
    # the newest `inv gpucheck` on this machine, whether the host was accepted before these
    # numbers were measured; absent where none ran (a description's hash stays what it was)
    from suite.records.gpucheck import host_check_summary

    checked = host_check_summary()
    if checked is not None:
        description["gpu_check"] = checked
    return description


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
