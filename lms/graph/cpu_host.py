"""This host's CPU as TensorFlow's CPU kernels see it, which decides their temporaries
(lms/graph/kernels.py): the kernel set (oneDNN's or Eigen's), the types oneDNN takes here, the
intra-op
threads, and the L3 cache size Eigen sizes its buffers by (measured: cpuid's, not Linux's)."""

import functools
import glob
import logging
import os
import tempfile

log = logging.getLogger("lms")


def cpu_kernels() -> str:
    """The kernel set this TensorFlow computes with on the CPU: "onednn" when oneDNN is on
    (TF_ENABLE_ONEDNN_OPTS, or its default for this CPU), "eigen" otherwise."""
    from lms import _tf_private

    return "onednn" if _tf_private.onednn_enabled() else "eigen"


def cpu_flags() -> frozenset:
    """This CPU's feature flags as Linux reports them (empty elsewhere)."""
    try:
        with open("/proc/cpuinfo") as file:
            for line in file:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.cache
def onednn_dtypes() -> frozenset:
    """The types oneDNN's kernels take on this CPU (TensorFlow's util.cc,
    IsDataTypeSupportedByOneDNNOnThisCPU); ops of other types run Eigen's kernels even with
    oneDNN on. Half needs AVX512-FP16 or AMX-FP16 (with AVX512BW) or AVX-NE-CONVERT: on this
    machine's AVX-512 EPYC, GoogLeNet fp16 with oneDNN on held Eigen's col buffers (its
    everything-swapped peak 40 % over the "onednn" simulation, 10 % under with Eigen's)."""
    import tensorflow as tf

    flags = cpu_flags()
    types = {tf.float32}
    if flags & {"avx512f", "avx_ne_convert"}:
        types.add(tf.bfloat16)
    half = "avx512bw" in flags and flags & {"avx512_fp16", "amx_fp16"}
    if half or "avx_ne_convert" in flags:
        types.add(tf.float16)
    return frozenset(types)


def intra_op_threads() -> int:
    """The CPU device's intra-op threads, as TensorFlow picks them (process_util.cc): the
    configured number, else TF_NUM_INTRAOP_THREADS, else the CPUs this process may run on."""
    import tensorflow as tf

    configured = tf.config.threading.get_intra_op_parallelism_threads()
    if configured > 0:
        return configured
    try:
        from_env = int(os.environ.get("TF_NUM_INTRAOP_THREADS", "0"))
    except ValueError:
        from_env = 0
    if from_env > 0:
        return from_env
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


# The probe: a half-precision 3D input gradient over 8 single-voxel images, 1 -> 1024 channels,
# whose col buffer is one element per image of its shard (TensorFlow's own kernel: oneDNN takes
# half on few CPUs), so the buffer's size gives the shard and the shard gives the working set
# to within PROBE_WORK * 2 bytes.
PROBE_IMAGES, PROBE_CHANNELS = 8, 1024
PROBE_WORK = 1 + 2 * PROBE_CHANNELS  # elements: A (1 x cout) + B (1 x cout) + C (1 x 1)
PROBE_ITEMSIZE = 2
L3_GRANULE = 256 * 2**10  # cache sizes are multiples of this; the probe's interval holds one
UNPROBED_L3 = 32 * 2**20


@functools.cache
def eigen_l3_bytes() -> int:
    """The L3 cache size Eigen's kernels use (`Eigen::internal::CacheSizes`, from cpuid; not
    what Linux reports: 320 MiB against 32 MiB on this AMD EPYC VM), found by running a 3D input
    gradient whose col buffer is one element per image of its shard (shard = ceil(L3 / 2 /
    PROBE_WORK)) and reading its size from TensorFlow's profiler. Where that cannot be seen
    (the profiler already running, no BFC allocator, oneDNN taking half), Linux's L3 size."""
    try:
        shard = _probe_shard()
    except Exception as error:  # noqa: BLE001 - any failure: the fallback below, said why
        size = _system_l3_bytes()
        log.warning(
            "Could not measure the L3 cache size Eigen's 3D convolution gradients size their "
            "buffers by (%s); simulating with the system's, %d MiB, which Eigen may not see: "
            "leave margin with safety_ratio",
            error,
            size // 2**20,
        )
        return size
    if shard is None:  # no col buffer: over 25x the tensors, an L3 of 0.9 GiB or more
        return 2**30
    high = shard * PROBE_WORK * PROBE_ITEMSIZE
    low = (shard - 1) * PROBE_WORK * PROBE_ITEMSIZE
    granule = high // L3_GRANULE * L3_GRANULE
    return granule if granule > low else high


def _probe_shard():
    import tensorflow as tf

    from lms import _tf_private

    if _tf_private.onednn_enabled() and tf.float16 in onednn_dtypes():
        raise RuntimeError("oneDNN runs the probe")
    gradient = tf.zeros([PROBE_IMAGES, 1, 1, 1, PROBE_CHANNELS], tf.float16)
    weights = tf.zeros([1, 1, 1, 1, PROBE_CHANNELS], tf.float16)
    sizes = tf.constant([PROBE_IMAGES, 1, 1, 1, 1])

    def run():
        return tf.raw_ops.Conv3DBackpropInputV2(
            input_sizes=sizes,
            filter=weights,
            out_backprop=gradient,
            strides=[1, 1, 1, 1, 1],
            padding="VALID",
        )

    run()  # the kernel is created outside the trace
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        try:
            run()
        finally:
            tf.profiler.experimental.stop()
        paths = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)
        space = _tf_private.xplane_pb2().XSpace()
        with open(paths[-1], "rb") as file:
            space.ParseFromString(file.read())
    seen = False
    for plane in space.planes:
        names, stats = plane.event_metadata, plane.stat_metadata
        for line in plane.lines:
            for event in line.events:
                if names[event.metadata_id].name != "MemoryAllocation":
                    continue
                values = {stats[s.metadata_id].name: s for s in event.stats}
                text = {
                    name: value.str_value or stats[value.ref_value].name
                    for name, value in values.items()
                    if value.str_value or value.ref_value
                }
                op, region = text.get("tf_op", ""), text.get("region_type", "")
                if "Conv3DBackpropInputV2" not in op:
                    continue
                seen = True
                if region == "temp":
                    requested = values["requested_bytes"]
                    bytes_ = requested.int64_value or requested.uint64_value
                    return bytes_ // PROBE_ITEMSIZE
    if not seen:
        raise RuntimeError("the allocator traced nothing (TF_CPU_ALLOCATOR_USE_BFC is not on)")
    return None


def _system_l3_bytes() -> int:
    for path in sorted(glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/")):
        try:
            with open(path + "level") as file:
                if file.read().strip() != "3":
                    continue
            with open(path + "size") as file:
                text = file.read().strip()
        except OSError:
            continue
        units = {"K": 2**10, "M": 2**20, "G": 2**30}
        if text[-1:] in units and text[:-1].isdigit():
            return int(text[:-1]) * units[text[-1]]
    return UNPROBED_L3


@functools.cache
def eigen_host(needs_l3: bool) -> tuple:
    """(intra-op threads, Eigen's L3 bytes or None): what Eigen's temporaries depend on."""
    return intra_op_threads(), eigen_l3_bytes() if needs_l3 else None


# Eigen's kernels (TF_ENABLE_ONEDNN_OPTS=0, CPUs without AVX-512, aarch64 under qemu) are
# modelled (lms/graph/kernels.py): GoogLeNet 96x96 b2 everything swapped, measured / simulated went
# from 1.85-1.90x to 0.92-1.01x (benchmarks/cpu_kernels_peak.py; oneDNN 1.07-1.10x). Left: their
# gradients' 25-30 MiB buffers (3D: up to 25x their tensors) make the peak in TensorFlow's own
# order depend on which two run side by side and where the allocator puts them: the 3D U-Net
# 16^3 b2, everything swapped in that order, measured 294-441 MiB against 319-327 simulated.
EIGEN_KERNELS_WARNING = (
    "This TensorFlow computes on the CPU with Eigen's kernels, not oneDNN's: LMS models their "
    "convolution gradients' working-set buffers, but in TensorFlow's own order which of them "
    "coincide varies between processes, so the device peak can exceed the plan's by up to "
    "~35 % (3D U-Net 16^3); leave margin with safety_ratio, let LMS enforce its order "
    "(ordering=1), or enable oneDNN"
)
