"""Keras 2's fused batch norm split into pieces (lms/split/rewrite.py splits every other kind of
op).

FusedBatchNormV3 normalizes with statistics over the batch and the pixels, so a piece cannot
compute its own: the pieces run in passes over the same host copy of the input, each pass in
sequence, with per-channel sums added on the device between them (a few hundred bytes):

- forward, training: the mean (sum of the pieces' sums), then the variance around it (two
  passes, as the kernel computes it: no cancellation), then each piece normalized by the same
  op in inference mode with those statistics. The running averages and the saved statistics
  are computed from them as the kernel computes them (the saved variance is the biased one,
  the running one Bessel-corrected, both mixed by `exponential_avg_factor`);
- gradient (FusedBatchNormGradV3): the sums of dy and of dy·(x − mean) over the pieces, then
  each piece's dx from them. It uses the forward's statistics when the forward was split in
  the same call; alone, it computes them again from x (two more passes) instead of reading the
  saved ones, whose meaning is the backend's (a GPU's cuDNN saves the inverse deviation);
- forward, inference: per channel, element by element: one pass.

A forward split in training also splits every gradient that reads its saved statistics, so no
unsplit gradient reads statistics of another backend's meaning. NHWC / NDHWC only.
"""

from dataclasses import dataclass

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from lms import _tf_private
from lms.split.pieces import PieceCopies

FUSED_NORMS = {"FusedBatchNormV3": 0, "FusedBatchNormGradV3": 1}  # op type -> x's input
_DONE = "_lms_split_norms"  # a graph's set of the batch norms already split


@dataclass(frozen=True)
class NormLayout:
    """A fused batch norm along `axis` (the batch, or the rows with a batch of 1)."""

    kind: str  # "training", "inference" or "gradient"
    axis: int
    length: int
    combine: str = "assemble"


def norm_layout(op, axis: int | None) -> "NormLayout | str":
    """How a fused batch norm splits along `axis` (lms.split.pieces.split_axis of its input), or why
    it cannot."""
    if op.name in getattr(op.graph, _DONE, ()):  # (a gradient split with its forward)
        return "it is split already"
    data_format = op.get_attr("data_format").decode()
    if data_format not in ("NHWC", "NDHWC"):
        return f"{op.type} in {data_format} (split in NHWC only)"
    x = op.inputs[FUSED_NORMS[op.type]]
    if axis is None:
        return "its input has neither a batch nor rows above 1"
    training = op.get_attr("is_training")
    if op.type == "FusedBatchNormGradV3":
        if not training:
            return "the gradient of a batch norm in inference mode"
        return NormLayout("gradient", axis, x.shape[axis])
    if training:
        for reader in _statistics_readers(op):
            if reader.type not in ("FusedBatchNormGradV3", "ZerosLike"):  # (a gradient's zeros)
                return f"its saved statistics are read by {reader.name} ({reader.type})"
    return NormLayout("training" if training else "inference", axis, x.shape[axis])


def _statistics_readers(op) -> set:
    """The ops that read a forward's saved statistics and were not split already."""
    done = getattr(op.graph, _DONE, set())
    return {r for t in op.outputs[3:] for r in t.consumers() if r.name not in done}


class _Passes:
    """Passes over host copies of the same rows: each piece reads its slices after the previous
    piece (of any pass) is done."""

    def __init__(self, io: PieceCopies, axis: int, bounds, previous):
        self.io, self.axis, self.bounds, self.previous = io, axis, bounds, previous

    def keep(self, tensor, passes: int):
        handle = self.io.keep(tensor, passes * len(self.bounds))
        self.previous = [*self.previous, handle.op]
        return handle

    def read(self, kept, like, start: int, stop: int):
        return self.io.read(kept, like, self.axis, start, stop)

    def total(self, piece_sum) -> tf.Tensor:
        """sum over the pieces of `piece_sum(start, stop)` (per channel), in sequence."""
        total = None
        for start, stop in self.bounds:
            with tf.control_dependencies(self.previous):
                part = piece_sum(start, stop)
            total = part if total is None else total + part
            self.previous = [total.op]
        return total

    def assembled(self, piece, like):
        """The pieces' outputs `piece(start, stop)` as one tensor (a host array), in sequence,
        and the last piece's store (what waits for the op now waits for)."""
        stored = None
        for start, stop in self.bounds:
            with tf.control_dependencies(self.previous):
                part = piece(start, stop)
            stored = self.io.store_piece(stored, part, self.axis, start, like.shape.as_list())
            self.previous = [self.io.token(stored)]
        return self.io.assemble(stored, like, self.axis), self.previous[0].op


def _per_channel(x) -> int:
    """How many values each channel's statistics are over: the batch and the pixels."""
    return x.shape.num_elements() // x.shape[-1]


def _channel_sum(x, dtype):
    return tf.reduce_sum(tf.cast(x, dtype), axis=list(range(x.shape.rank - 1)))


def _statistics(passes: _Passes, kept, x, dtype):
    """The batch's mean and biased variance per channel, in two passes (the variance around the
    mean, as the kernel computes it)."""
    count = _per_channel(x)
    mean = passes.total(lambda a, b: _channel_sum(passes.read(kept, x, a, b), dtype)) / count

    def squares(a, b):
        return _channel_sum(tf.square(tf.cast(passes.read(kept, x, a, b), dtype) - mean), dtype)

    return mean, passes.total(squares) / count


def _replace(op, outputs: dict, shapes: set) -> None:
    """Reroute the readers of `op`'s outputs to `outputs` (position -> tensor), but those of
    output 0's static shape (`shapes`: read as constants now, pruned with `op`)."""
    for position, tensor in outputs.items():
        out = op.outputs[position]
        for reader in list(out.consumers()):
            if reader in shapes or reader is tensor.op:
                continue
            for k, x in enumerate(reader.inputs):
                if x is out:
                    _tf_private.update_input(reader, k, tensor)
    done = getattr(op.graph, _DONE, set())
    done.add(op.name)
    setattr(op.graph, _DONE, done)


def split_norm(op, layout: NormLayout, bounds, io: PieceCopies, constant_shapes) -> list:
    """Replace a fused batch norm (and, for a forward in training, the gradients reading its
    saved statistics) by pieces over `bounds` (module docstring). `constant_shapes(tensor)`
    turns the readers of a tensor's static shape into constants first. Returns, per op
    replaced, (op, its combined output 0, the op its waiters now wait for)."""
    passes = _Passes(io, layout.axis, bounds, [])
    if layout.kind == "gradient":
        return [_gradient(op, passes, None, constant_shapes)]
    x, scale, offset, mean_in, var_in = op.inputs[:5]
    dtype = scale.dtype
    kept = passes.keep(x, 3 if layout.kind == "training" else 1)
    if layout.kind == "training":
        mean, variance = _statistics(passes, kept, x, dtype)
    else:
        mean, variance = mean_in, var_in

    inference = {
        "is_training": attr_value_pb2.AttrValue(b=False),
        "exponential_avg_factor": attr_value_pb2.AttrValue(f=1.0),
    }

    def normalized(a, b):
        args = [passes.read(kept, x, a, b), scale, offset, mean, variance]
        return _tf_private.copy_op(op, args, inference)

    gradients = []
    if layout.kind == "training":
        gradients = [r for r in _statistics_readers(op) if r.type == "FusedBatchNormGradV3"]
    shapes = constant_shapes(op.outputs[0])
    whole, last = passes.assembled(normalized, op.outputs[0])
    outputs = {0: whole}
    if layout.kind == "training":
        factor = op.get_attr("exponential_avg_factor")
        count = _per_channel(x)
        corrected = variance * (count / max(count - 1, 1))
        if factor != 1:
            mean_out = (1 - factor) * mean_in + factor * mean
            var_out = (1 - factor) * var_in + factor * corrected
        else:
            mean_out, var_out = mean, corrected
        outputs |= {1: mean_out, 2: var_out, 3: mean, 4: variance}
    _replace(op, outputs, shapes)
    replaced = [(op, whole, last)]
    for gradient in gradients:
        replaced.append(_gradient(gradient, passes, (mean, variance), constant_shapes))
    return replaced


def _gradient(op, passes: _Passes, statistics, constant_shapes):
    """FusedBatchNormGradV3 in pieces: dx, and the scale's and offset's gradients."""
    dy, x, scale = op.inputs[:3]
    dtype, epsilon = scale.dtype, op.get_attr("epsilon")
    kept_dy = passes.keep(dy, 2)
    kept_x = passes.keep(x, 2 if statistics else 4)
    mean, variance = statistics or _statistics(passes, kept_x, x, dtype)
    count = _per_channel(x)
    inverse = tf.math.rsqrt(variance + epsilon)

    def read(a, b):
        return (
            tf.cast(passes.read(kept_dy, dy, a, b), dtype),
            tf.cast(passes.read(kept_x, x, a, b), dtype) - mean,
        )

    def sums(a, b):
        g, centred = read(a, b)
        return tf.stack([_channel_sum(g, dtype), _channel_sum(g * centred, dtype)])

    totals = passes.total(sums)
    offset_grad, dot = totals[0], totals[1]

    def dx(a, b):
        g, centred = read(a, b)
        value = g - offset_grad / count - centred * (inverse * inverse * dot / count)
        return tf.cast(scale * inverse * value, dy.dtype)

    shapes = constant_shapes(op.outputs[0])
    whole, last = passes.assembled(dx, op.outputs[0])
    empty = tf.zeros([0], dtype)
    _replace(op, {0: whole, 1: dot * inverse, 2: offset_grad, 3: empty, 4: empty}, shapes)
    return op, whole, last
