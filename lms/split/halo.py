"""Windowed ops with a batch of 1, split along the rows (the depth of a volume) with the halo
their window needs, so that a single image's convolution no longer has to be on the device whole
(lms/split/rewrite.py splits by the `PieceLayout` this module gives, `RowLayout`: how each piece
reads and what it computes).

A piece of a window op sees its rows exactly as the whole op sees them: it reads the rows its
window covers, pads them where they leave the image (zeros for a convolution, -inf for a max
pool: what SAME padding means to each), pads the other spatial axes as the whole op does, and
computes with VALID padding. Per op kind, piece [a, b) is:

- forward (convolution, max pool): output rows [a, b) from input rows [a·s − p, (b−1)·s + k − p);
- input gradient (a convolution's, a max pool's): input rows [a, b) from the output rows whose
  windows touch them, computed over those windows' region and cut to [a, b) (rows no window
  covers get a gradient of 0, as in the whole op);
- filter gradient: the sum over output-row pieces of each piece's gradient.

Average pooling with SAME padding divides each window's sum by the count of its elements inside
the image. A piece pads with zeros and computes with VALID padding (dividing by the whole
window), then scales each output by window / count (per axis: separable); its gradient scales the
incoming gradient so first, then spreads it as a VALID gradient over the padded region.

Not along the rows: NCHW layouts (the GPU's own after Grappler's layout pass; graphs are split
before it, in NHWC).
"""

import math
from dataclasses import dataclass

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from lms import _tf_private
from lms.graph.pool_reads import max_pooled
from lms.split.pieces import ReadAlongAxis

CONVOLUTIONS = {
    "Conv2D": "forward", "Conv3D": "forward", "DepthwiseConv2dNative": "forward",
    "Conv2DBackpropInput": "input_grad", "Conv3DBackpropInputV2": "input_grad",
    "DepthwiseConv2dNativeBackpropInput": "input_grad",
    "Conv2DBackpropFilter": "filter_grad", "Conv3DBackpropFilterV2": "filter_grad",
    "DepthwiseConv2dNativeBackpropFilter": "filter_grad",
}  # fmt: skip
MAX_POOLS = {"MaxPool": "forward", "MaxPool3D": "forward"}
MAX_POOLS |= {"MaxPoolGrad": "input_grad", "MaxPool3DGrad": "input_grad"}
AVG_POOLS = {"AvgPool": "forward", "AvgPool3D": "forward"}
AVG_POOLS |= {"AvgPoolGrad": "input_grad", "AvgPool3DGrad": "input_grad"}
ROW_OPS = CONVOLUTIONS | MAX_POOLS | AVG_POOLS


@dataclass(frozen=True)
class Window:
    """One spatial axis of a window op: input and output lengths, the window's extent (dilation
    included), its stride and the padding before the first row."""

    size_in: int
    size_out: int
    extent: int
    stride: int
    before: int

    @property
    def after(self) -> int:
        """Padding past the last row that the last window reads (0 where VALID leaves rows)."""
        return max(0, (self.size_out - 1) * self.stride + self.extent - self.size_in - self.before)

    def rows_in(self, start: int, stop: int) -> tuple[int, int]:
        """The input rows (padded coordinates, may leave the image) output rows [start, stop)
        read."""
        first = start * self.stride - self.before
        return first, first + (stop - start - 1) * self.stride + self.extent

    def scales(self, start: int, stop: int) -> np.ndarray:
        """Per output row in [start, stop): the window's extent over the count of its rows
        inside the image (what turns a zero-padded VALID average into a SAME one)."""
        first = np.arange(start, stop) * self.stride - self.before
        inside = np.minimum(first + self.extent, self.size_in) - np.maximum(first, 0)
        return self.extent / inside

    def border_scales(self, start: int, stop: int) -> tuple:
        """`scales` of output rows [start, stop) as (row - start, scale) for the rows whose
        window leaves the image (every other row's is 1): what tells two pieces' forms apart,
        without an array a piece (a chain's bounds try up to eight cuts of every piece:
        GoogLeNet 4096² b1, 12,711 forms)."""
        first_inside = -(-self.before // self.stride)  # windows wholly inside the image
        last_inside = (self.size_in - self.extent + self.before) // self.stride
        rows = [*range(start, min(stop, first_inside)), *range(max(start, last_inside + 1), stop)]
        found = []
        for row in sorted(set(rows)):
            first = row * self.stride - self.before
            inside = min(first + self.extent, self.size_in) - max(first, 0)
            found.append((row - start, self.extent / inside if inside else float("inf")))
        return tuple(found)

    def rows_out(self, start: int, stop: int) -> tuple[int, int]:
        """The output rows whose windows touch input rows [start, stop)."""
        first = math.ceil((start + self.before - self.extent + 1) / self.stride)
        last = (stop - 1 + self.before) // self.stride
        return max(0, first), min(self.size_out, last + 1)


def _attr_list(op, name: str) -> list:
    return list(op.get_attr(name))


def _windows(op, kind: str) -> list[Window] | str:
    """The op's spatial axes as Windows, or why they cannot be read."""
    data_format = op.get_attr("data_format").decode()
    if data_format not in ("NHWC", "NDHWC"):
        return f"{op.type} in {data_format} (rows are split in NHWC / NDHWC only)"
    if kind == "forward":
        inputs, outputs = op.inputs[0].shape, op.outputs[0].shape
    elif kind == "input_grad":  # the incoming gradient is the last input
        inputs, outputs = op.outputs[0].shape, op.inputs[-1].shape
    else:
        inputs, outputs = op.inputs[0].shape, op.inputs[2].shape
    rank = inputs.rank
    strides = _attr_list(op, "strides")
    if op.type in MAX_POOLS or op.type in AVG_POOLS:
        kernel, dilations = _attr_list(op, "ksize"), [1] * rank
    else:
        filter_shape = _filter_shape(op, kind)
        kernel = [1, *filter_shape[: rank - 2], 1]
        dilations = _attr_list(op, "dilations")
    padding = op.get_attr("padding").decode()
    if padding == "EXPLICIT":
        explicit = _attr_list(op, "explicit_paddings")
        befores = [explicit[2 * axis] for axis in range(rank)]
    elif padding in ("SAME", "VALID"):
        befores = []
        for axis in range(rank):
            extent = (kernel[axis] - 1) * dilations[axis] + 1
            total = max((outputs[axis] - 1) * strides[axis] + extent - inputs[axis], 0)
            befores.append(total // 2 if padding == "SAME" else 0)
    else:
        return f"{op.type} with padding {padding}"
    if any(kernel[a] != 1 or strides[a] != 1 for a in (0, rank - 1)):
        return f"{op.type} with a window along the batch or channels"
    return [
        Window(inputs[a], outputs[a], (kernel[a] - 1) * dilations[a] + 1, strides[a], befores[a])
        for a in range(1, rank - 1)
    ]


def _filter_shape(op, kind: str):
    """A forward op's or input gradient's filter input, or what a filter gradient computes."""
    return (op.outputs[0] if kind == "filter_grad" else op.inputs[1]).shape.as_list()


@dataclass(frozen=True)
class RowLayout(ReadAlongAxis):
    """A windowed op with a batch of 1 in pieces along the rows (module docstring); a
    `PieceLayout` (lms/split/pieces.py)."""

    kind: str  # "forward", "input_grad" or "filter_grad"
    windows: tuple  # per spatial axis, the first one split
    kept: tuple  # inputs read in pieces from their host copy
    combine: str  # "assemble" (forward, input_grad) or "sum" (filter_grad)
    axis: int = 1

    @property
    def length(self) -> int:
        rows = self.windows[0]
        return rows.size_in if self.kind == "input_grad" else rows.size_out

    def reads(self, start: int, stop: int) -> dict:
        """The rows of each kept input piece [start, stop) reads (a `PieceLayout`'s): the
        rows its windows cover, inside the image."""
        rows = self.windows[0]
        if self.kind == "input_grad":
            first, last = rows.rows_out(start, stop)
            if first >= last:  # no window reads these rows: each copy read emptily
                return {i: (0, 0) for i in self.kept}
            found = {i: (first, last) for i in self.kept}  # the incoming gradient (or average)
            if 0 in self.kept:  # a max pool's input, its forward output recomputed from it
                found[0] = _inside(rows, *rows.rows_in(first, last))
            return found
        found = {0: _inside(rows, *rows.rows_in(start, stop))}
        if self.kind == "filter_grad":
            found[2] = (start, stop)
        return found

    def form(self, start: int, stop: int) -> tuple:
        """The padding of the rows a piece reads (and, for an input gradient, of the
        incoming gradient's rows and where its rows lie in the region computed); an average
        pool's scales."""
        rows = self.windows[0]
        if self.kind != "input_grad":
            lo, hi = rows.rows_in(start, stop)
            form = (max(0, -lo), max(0, hi - rows.size_in))
            return form + rows.border_scales(start, stop)
        first, last = rows.rows_out(start, stop)
        if first >= last:
            return ("none",)
        lo, hi = rows.rows_in(first, last)
        form = (max(0, -lo), max(0, hi - rows.size_in), start - lo, stop - lo)
        if rows.stride == 1:  # as a forward convolution: the incoming gradient's padding
            early, late = start + rows.before - rows.extent + 1, stop + rows.before
            form += (max(0, -early), max(0, late - rows.size_out))
        return form + rows.border_scales(first, last)

    def piece(self, op, start: int, stop: int, read):
        """Piece [start, stop) of `op` (rows of what `length` counts); `read(i, lo, hi)` reads
        rows [lo, hi) of input i from its host copy."""
        if self.kind == "input_grad":
            return self._input_grad(op, start, stop, read)
        rows = self.windows[0]
        lo, hi = rows.rows_in(start, stop)
        padded = self._padded_rows(op, read, 0, lo, hi)
        if op.type in AVG_POOLS:
            return self._to_same(_valid_op(op, [padded]), start, stop)
        if self.kind == "forward":
            return _valid_op(op, [padded, op.inputs[1]] if len(op.inputs) > 1 else [padded])
        return _valid_op(op, [padded, op.inputs[1], read(2, start, stop)])

    def _to_same(self, pooled, start: int, stop: int):
        """An average pool's (or its incoming gradient's) output rows [start, stop) scaled by
        window / count inside the image, axis by axis (`Window.scales`); as is where no window
        leaves the image (VALID padding)."""
        spans = [(start, stop)] + [(0, w.size_out) for w in self.windows[1:]]
        rank = len(self.windows) + 2
        for axis, (window, (a, b)) in enumerate(zip(self.windows, spans, strict=True), 1):
            scales = window.scales(a, b)
            if np.all(scales == 1):
                continue
            shape = [1] * rank
            shape[axis] = b - a
            pooled = pooled * tf.constant(scales.reshape(shape), pooled.dtype)
        return pooled

    def _padded_rows(self, op, read, i: int, lo: int, hi: int):
        """Input i's rows [lo, hi) (padded coordinates), padded where they leave the image and
        along the other spatial axes as the whole op pads them."""
        rows = self.windows[0]
        inside = read(i, *_inside(rows, lo, hi))
        pads = [[0, 0], [max(0, -lo), max(0, hi - rows.size_in)]]
        pads += [[w.before, w.after] for w in self.windows[1:]] + [[0, 0]]
        fill = -np.inf if op.type in MAX_POOLS else 0
        return tf.pad(inside, pads, constant_values=tf.constant(fill, inside.dtype))

    def _input_grad(self, op, start: int, stop: int, read):
        rows, out = self.windows[0], op.outputs[0]
        first, last = rows.rows_out(start, stop)
        shape = out.shape.as_list()
        shape[1] = stop - start
        if first >= last:  # no window reads these rows: their gradient is 0 (the host copies
            # are still read, emptily, so that each is read as often as it was kept for)
            with tf.control_dependencies([read(i, 0, 0) for i in self.kept]):
                return tf.zeros(shape, out.dtype)
        if _as_forward(op, self.windows):
            return _forward_input_grad(op, self.windows, start, stop, read(2, first, last))
        lo, hi = rows.rows_in(first, last)
        region = [(lo, hi)] + [(-w.before, w.size_in + w.after) for w in self.windows[1:]]
        if op.type in MAX_POOLS:
            orig_input = self._padded_rows(op, read, 0, lo, hi)  # its output: recomputed
            inputs = [orig_input, max_pooled(op, orig_input, "VALID"), read(2, first, last)]
        elif op.type in AVG_POOLS:
            sizes = [1, *(b - a for a, b in region), shape[-1]]
            scaled = self._to_same(read(1, first, last), first, last)
            inputs = [tf.constant(sizes, op.inputs[0].dtype), scaled]
        else:
            sizes = [1, *(b - a for a, b in region), shape[-1]]
            inputs = [tf.constant(sizes, op.inputs[0].dtype), op.inputs[1], read(2, first, last)]
        gradient = _valid_op(op, inputs)
        wanted = [(start, stop)] + [(0, w.size_in) for w in self.windows[1:]]
        return _cut(gradient, region, wanted)


def _as_forward(op, windows) -> bool:
    """Whether a convolution's input gradient is computed as a forward convolution of its
    incoming gradient (`_forward_input_grad`): stride 1 along every spatial axis, padding no
    wider than the window, a dilation only in 2D (TensorFlow's CPU Conv3D has none)."""
    if op.type not in ("Conv2DBackpropInput", "Conv3DBackpropInputV2"):
        return False
    dilated = any(d != 1 for d in op.get_attr("dilations"))
    if dilated and op.type == "Conv3DBackpropInputV2":
        return False
    return all(
        w.stride == 1 and w.before <= w.extent - 1 and w.after <= w.extent - 1 for w in windows
    )


def _forward_input_grad(op, windows, start: int, stop: int, incoming):
    """Input rows [start, stop) of a stride-1 convolution's gradient as a forward VALID
    convolution of the incoming gradient's rows whose windows touch them (`incoming`: rows
    `rows_out(start, stop)`), zero-padded by (extent - 1 - padding) on each side, with the
    filter flipped along its spatial axes and its channels swapped: exactly the piece's rows.
    As the gradient op itself it computes the region all those windows cover, and a piece of
    a few rows computed twice its rows and more (the 3D U-Net 144³: 61 of a 134 s step)."""
    rows = windows[0]
    first = start + rows.before - rows.extent + 1  # unclipped: the rows before 0 are zeros
    last = stop + rows.before
    pads = [[0, 0], [max(0, -first), max(0, last - rows.size_out)]]
    pads += [[w.extent - 1 - w.before, w.extent - 1 - w.after] for w in windows[1:]]
    # PadV2, as the other pieces pad: Grappler's remapper folds a plain Pad into the Conv3D
    # after it and fails when the Pad has a control fanout (LMS's enforced order), giving up
    # every fusion of the step ("Mutation::Apply error", the 3D U-Net 64³)
    padded = tf.pad(incoming, pads + [[0, 0]], constant_values=tf.constant(0, incoming.dtype))
    spatial = len(windows)
    kernel = _flipped_kernel(op, spatial)
    if spatial == 2:
        dilations = list(op.get_attr("dilations"))[1:-1]
        return tf.nn.conv2d(padded, kernel, 1, "VALID", dilations=dilations)
    return tf.nn.conv3d(padded, kernel, [1] * 5, "VALID")


_FLIPPED = "_lms_split_flipped_kernels"  # a graph's flipped filters, by gradient op name


def _flipped_kernel(op, spatial: int):
    """`op`'s filter flipped along its spatial axes with its channels swapped: made once per
    op, for all its pieces, waiting for nothing."""
    made = getattr(op.graph, _FLIPPED, None)
    if made is None:
        made = {}
        setattr(op.graph, _FLIPPED, made)
    if op.name not in made:
        with tf.control_dependencies(None):
            kernel = tf.reverse(op.inputs[1], list(range(spatial)))
            made[op.name] = tf.transpose(kernel, [*range(spatial), spatial + 1, spatial])
    return made[op.name]


def _inside(rows: Window, lo: int, hi: int) -> tuple[int, int]:
    """Rows [lo, hi) (padded coordinates) within the image."""
    return max(lo, 0), min(hi, rows.size_in)


def _cut(tensor, have: list, want: list):
    """`tensor`, which covers ranges `have` of the spatial axes, cut (or padded with zeros) to
    ranges `want`."""
    begin, size, pads = [0], [-1], [[0, 0]]
    for (h0, h1), (w0, w1) in zip(have, want, strict=True):
        lo, hi = max(h0, w0), max(min(h1, w1), max(h0, w0))
        begin.append(lo - h0)
        size.append(hi - lo)
        pads.append([lo - w0, w1 - hi])
    return tf.pad(tf.slice(tensor, begin + [0], size + [-1]), pads + [[0, 0]])


def _valid_op(op, inputs):
    """A copy of `op` over `inputs` with VALID padding (the pieces are padded already)."""
    overrides = {"padding": attr_value_pb2.AttrValue(s=b"VALID")}
    if "explicit_paddings" in op.node_def.attr:
        overrides["explicit_paddings"] = attr_value_pb2.AttrValue(
            list=attr_value_pb2.AttrValue.ListValue()
        )
    return _tf_private.copy_op(op, inputs, overrides)


def row_layout(op) -> RowLayout | str:
    """How a windowed op with a batch of 1 splits along the rows, or why it cannot."""
    kind = ROW_OPS.get(op.type)
    if kind is None:
        return f"{op.type} with a batch of 1 is not split along the rows"
    windows = _windows(op, kind)
    if isinstance(windows, str):
        return windows
    kept = {"forward": (0,), "input_grad": (2,), "filter_grad": (0, 2)}[kind]
    if op.type in MAX_POOLS and kind == "input_grad":
        kept = (0, 2)  # the forward output is recomputed from input 0 (pieces.max_pooled)
    if op.type in AVG_POOLS and kind == "input_grad":
        kept = (1,)
    layout = RowLayout(kind, tuple(windows), kept, "sum" if kind == "filter_grad" else "assemble")
    if layout.length < 2:
        return f"{op.type} has a single row to split"
    return layout
