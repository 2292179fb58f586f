"""What an op's kernel holds besides its inputs and outputs while it runs, per kernel set.

The simulator adds each op's temporary to the device memory of its step. Which temporary
depends on the kernels that run the step (`Analysis.kernels`, set by `LMS` from the mechanism
and `lms.graph.cpu_host.cpu_kernels()`):

- "onednn" (TensorFlow's CPU kernels on x86_64 with AVX-512, and some Arm CPUs) and "gpu"
  (cuDNN's workspaces): a convolution holds a buffer about as large as its largest input or
  output (`WORKSPACE_OPS`). Under "onednn", ops of a type oneDNN does not take on this CPU
  (`onednn_dtypes`: half without AVX512-FP16) and max pool gradients it cannot pair with their
  pool run Eigen's kernels, modelled as below.
- "eigen" (TF_ENABLE_ONEDNN_OPTS=0, CPUs without AVX-512, aarch64 under qemu): TensorFlow's own
  CPU kernels. Only their `allocate_temp` buffers reach the device allocator; Eigen's contraction
  buffers come from malloc (the CPU device hands Eigen no allocator), so a forward convolution,
  fused or not, holds nothing. Measured per op (the profiler's allocator events, exact to the
  byte for every case of tests/_kernel_temps.py) and read in TensorFlow's sources, the
  gradients hold im2col buffers sized by a working set, not by the tensors:

  * Conv2DBackpropFilter (conv_grad_filter_ops.cc, Conv2DCustomBackpropFilterOp): a
    [shard, out_pixels, kh*kw*cin] col buffer, shard = ceil(30 MiB / sizeof(T) / work), work =
    out_pixels*kh*kw*cin + out_pixels*cout + kh*kw*cin*cout elements. The shard is not capped
    by the batch, so every filter gradient holds up to 30 MiB however small its tensors (a 1x1
    64->64 convolution over 4x48x48: 15.2 MiB, [27, 2304, 64]; 3x3 32->32 over 8x8x8: 18.6 MiB).
  * Conv2DBackpropInput (conv_grad_input_ops.h, Conv2DCustomBackpropInputOp): one image's col
    buffer [out_pixels, kh*kw*cin] when the batch is 1 or work / intra-op threads >= 256 KiB /
    sizeof(T); else the 30 MiB shard above. The threads matter: 4x24x24x64, 3x3, 2 threads
    1.3 MiB, 8 threads 25.3 MiB.
  * Conv3DBackpropInputV2 / Conv3DBackpropFilterV2 (conv_grad_ops_3d.cc, Conv3DCustom*): the
    same col buffers with Eigen's L3 cache size as the working set (`eigen_l3_bytes`; one
    volume when the input gradient's batch is 1), unless the buffer exceeds 25x the elements of
    input, filter and output gradient: then Eigen's kernel runs and holds nothing (as do half
    filter gradients). Eigen reads the L3 size from cpuid: 320 MiB on this 2-core AMD EPYC VM
    whose Linux reports 32 MiB. The 3D U-Net 32^3's up0_conv1 gradients held 648 MiB each.
  * MaxPoolGrad (maxpooling_op.cc): the pool recomputed with its argmax, a T and an int64
    tensor of the pool's output shape. MaxPool3DGrad, AvgPoolGrad, batch norm and element-wise
    kernels hold nothing; depthwise gradients a few KiB (a filter per shard: not modelled).

  These buffers are large and their ops often run beside another one in TensorFlow's free
  order (`Temporaries.side_by_side`). With them modelled, GoogLeNet 96x96 b2 everything swapped
  measured / simulated went from 1.85-1.90x to 0.92-1.01x (benchmarks/cpu_kernels_peak.py;
  oneDNN's 1.07-1.10x), the 3D U-Net 32^3's from 5.0x to 1.00-1.03x.
"""

import math
from dataclasses import dataclass

from lms.graph.cpu_host import eigen_host, onednn_dtypes

KERNEL_SETS = ("onednn", "eigen", "gpu")

# oneDNN's and cuDNN's convolutions: a temporary about as large as their largest input or output.
WORKSPACE_OPS = frozenset(
    {
        "Conv2D",
        "Conv2DBackpropInput",
        "Conv2DBackpropFilter",
        "Conv3D",
        "Conv3DBackpropInputV2",
        "Conv3DBackpropFilterV2",
        "DepthwiseConv2dNative",
        "DepthwiseConv2dNativeBackpropInput",
        "DepthwiseConv2dNativeBackpropFilter",
        "_FusedConv2D",
    }
)

# Eigen's kernels (TensorFlow's conv_grad_filter_ops.cc, conv_grad_input_ops.h): the 2D
# gradients' working set is a fixed "L3 cache" of 30 MiB; an input gradient contracts one image
# at a time when each thread gets at least an "L2 cache" of 256 KiB of work.
EIGEN_2D_WORKING_SET = 30 * 2**20
EIGEN_MIN_THREAD_WORK = 256 * 2**10
# conv_grad_ops_3d.cc: a col buffer over this many times its tensors' elements falls back to
# Eigen's own kernel, which allocates nothing through TensorFlow.
EIGEN_3D_MAX_OVERHEAD = 25
EIGEN_3D_OPS = frozenset({"Conv3DBackpropInputV2", "Conv3DBackpropFilterV2"})
ARGMAX_BYTES = 8  # MaxPoolGrad's argmax: int64 per output element


@dataclass(frozen=True)
class Temporaries:
    """Per op of an analysis: the bytes its kernel holds while it runs, and whether that is an
    Eigen kernel's working-set buffer, which counts beside the op before it in TensorFlow's free
    order (two ops in flight: the executor runs a convolution's input and filter gradients, or
    two branches' gradients, side by side; GoogLeNet 96x96 b2 everything swapped held a 23.1 and
    a 15.2 MiB col buffer at its peak)."""

    bytes: list
    side_by_side: list


def temporaries(analysis, kernels: str) -> Temporaries:
    """What each op of `analysis` holds while it runs under `kernels` (one of KERNEL_SETS),
    besides what `OpInfo.temp_bytes` already counts (function calls). Under "onednn", ops of a
    type oneDNN does not take on this CPU (`onednn_dtypes`: half without AVX512-FP16) run
    Eigen's kernels."""
    if kernels not in KERNEL_SETS:
        raise ValueError(f"kernels must be one of {KERNEL_SETS}; received {kernels!r}")
    count = len(analysis.ops)
    held, eigen = [0] * count, [False] * count
    candidates = [
        i
        for i, op in enumerate(analysis.ops)
        if op.runs and op.outputs and (op.type in WORKSPACE_OPS or op.type in EIGEN_RULES)
    ]
    if not candidates:
        return Temporaries(held, eigen)
    graph_ops = {op.name: op for op in analysis.graph.get_operations()}
    supported = onednn_dtypes() if kernels == "onednn" else frozenset()
    for i in candidates:
        info, op = analysis.ops[i], graph_ops.get(analysis.ops[i].name)
        if kernels == "eigen" or (
            kernels == "onednn"
            and op is not None
            and (_dtype(op) not in supported or _unpaired(analysis, info))
        ):
            eigen[i] = True
        elif info.type in WORKSPACE_OPS:
            held[i] = max(_buffer_bytes(analysis, t) for t in info.inputs + info.outputs)
    wanted = [i for i in candidates if eigen[i] and analysis.ops[i].type in EIGEN_RULES]
    if wanted:
        needs_l3 = any(analysis.ops[i].type in EIGEN_3D_OPS for i in wanted)
        threads, l3 = eigen_host(needs_l3)
        for i in wanted:
            op = graph_ops.get(analysis.ops[i].name)
            shapes = None if op is None else _shapes(analysis, analysis.ops[i], op)
            if shapes is not None:
                rule = EIGEN_RULES[op.type]
                held[i] = int(rule(shapes, _dtype(op).size, threads, l3))
    return Temporaries(held, eigen)


def _unpaired(analysis, info) -> bool:
    """A max pool gradient oneDNN cannot pair with its forward op (its pooled input is not a
    MaxPool's output): TensorFlow's own kernel runs, which recomputes the pool with its argmax."""
    if info.type != "MaxPoolGrad" or len(info.inputs) < 2:
        return False
    return analysis.ops[analysis.tensors[info.inputs[1]].producer].type != "MaxPool"


def _dtype(op):
    try:
        return op.get_attr("T")
    except ValueError:
        return op.outputs[0].dtype


def _buffer_bytes(analysis, tensor: int) -> int:
    return analysis.tensors[analysis.tensors[tensor].buffer].bytes


def _shapes(analysis, info, op):
    """The static shapes of the op's inputs and outputs (a leading None taken from the sizes the
    analysis computed), or None where one is unknown."""
    shapes = []
    for tensor, index in [(t, k) for t, k in zip(op.inputs, info.inputs, strict=True)] + [
        (t, k) for t, k in zip(op.outputs, info.outputs, strict=True)
    ]:
        if tensor.shape.rank is None:
            return None
        dims = tensor.shape.as_list()
        if dims and dims[0] is None and all(d is not None for d in dims[1:]):
            rest = math.prod(dims[1:]) * max(tensor.dtype.size, 1)
            size = analysis.tensors[index].bytes
            dims[0] = size // rest if rest and size else None
        if any(d is None for d in dims):
            return None
        shapes.append(dims)
    return shapes


def _conv_dims(filter_shape, out_backprop_shape):
    """(batch, output pixels, filter elements per output channel, output channels)."""
    batch, *out_spatial, out_channels = out_backprop_shape
    filter_total = math.prod(filter_shape[:-1])  # kh * kw (* kd) * cin
    return batch, math.prod(out_spatial), filter_total, out_channels


def _ceil(target: int, work: int) -> int:
    """Images per shard: the working set over one image's work, rounded up (as the kernels)."""
    return -(-target // work) if work else 0


def _conv2d_backprop_filter(shapes, itemsize, threads, l3):
    _, _, out_backprop, filter_shape = shapes
    _, pixels, total, out_channels = _conv_dims(filter_shape, out_backprop)
    work = pixels * total + pixels * out_channels + total * out_channels
    shard = _ceil(EIGEN_2D_WORKING_SET // itemsize, work)
    return shard * pixels * total * itemsize


def _conv2d_backprop_input(shapes, itemsize, threads, l3):
    _, filter_shape, out_backprop, _ = shapes
    batch, pixels, total, out_channels = _conv_dims(filter_shape, out_backprop)
    work = pixels * out_channels + total * out_channels + pixels * total
    parallel = batch == 1 or work // max(threads, 1) >= EIGEN_MIN_THREAD_WORK // itemsize
    shard = 1 if parallel else _ceil(EIGEN_2D_WORKING_SET // itemsize, work)
    return shard * pixels * total * itemsize


def _conv3d_col_buffer(shard, pixels, total, tensors, itemsize):
    col = shard * pixels * total
    if col // max(tensors, 1) > EIGEN_3D_MAX_OVERHEAD:
        return 0  # Eigen's own kernel: nothing through TensorFlow's allocator
    return col * itemsize


def _conv3d_backprop_input(shapes, itemsize, threads, l3):
    _, filter_shape, out_backprop, in_backprop = shapes
    batch, pixels, total, out_channels = _conv_dims(filter_shape, out_backprop)
    work = pixels * out_channels + total * out_channels + pixels * total
    shard = 1 if batch == 1 else _ceil(l3 // itemsize, work)
    tensors = math.prod(in_backprop) + math.prod(filter_shape) + math.prod(out_backprop)
    return _conv3d_col_buffer(shard, pixels, total, tensors, itemsize)


def _conv3d_backprop_filter(shapes, itemsize, threads, l3):
    if itemsize == 2:
        return 0  # half: Eigen's kernel (no custom one: its im2col memcpy's T)
    inputs, _, out_backprop, filter_shape = shapes
    _, pixels, total, out_channels = _conv_dims(filter_shape, out_backprop)
    work = pixels * total + pixels * out_channels + total * out_channels
    shard = _ceil(l3 // itemsize, work)
    tensors = math.prod(inputs) + math.prod(filter_shape) + math.prod(out_backprop)
    return _conv3d_col_buffer(shard, pixels, total, tensors, itemsize)


def _max_pool_grad(shapes, itemsize, threads, l3):
    _, pooled, *_ = shapes
    return math.prod(pooled) * (itemsize + ARGMAX_BYTES)


EIGEN_RULES = {
    "Conv2DBackpropFilter": _conv2d_backprop_filter,
    "Conv2DBackpropInput": _conv2d_backprop_input,
    "Conv3DBackpropInputV2": _conv3d_backprop_input,
    "Conv3DBackpropFilterV2": _conv3d_backprop_filter,
    "MaxPoolGrad": _max_pool_grad,
}
