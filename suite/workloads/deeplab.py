"""DeepLabV3+ with DeepLab's modified aligned Xception-65 backbone.

Output stride 16 (the strided exit-flow unit becomes atrous, rate 2), ASPP with rates 6/12/18 and
image pooling, decoder at output stride 4 fed by the entry flow's block-2 features, logits upsampled
to the input size. Batch norm is trainable (fine_tune_batch_norm=True) with DeepLab's decay and
epsilon. As in DeepLab's xception_65, separable convolutions apply ReLU *before* the depthwise
convolution and put batch norm between depthwise and pointwise. Padding is "same" throughout
(DeepLab pads strided convolutions explicitly; tensor sizes can differ from its by one row).

`build(..., middle_blocks=n)` keeps the first n of the 16 identical middle-flow blocks (728
channels, rate 1, a sum shortcut): the same layer kinds, sizes and names in a shorter graph, for
tests whose cost grows with the op count (the suite's trials always build all 16).
"""

import keras

from suite.workloads.losses import segmentation as loss

__all__ = ["build", "loss"]

OUTPUT_STRIDE = 16
ASPP_RATES = (6, 12, 18)
BN = {"momentum": 0.9997, "epsilon": 1e-5}

# (name, depths of the three units, shortcut, stride): DeepLab's xception_65 block list
MIDDLE_BLOCKS = 16
_BLOCKS = (
    [
        ("entry_block1", (128, 128, 128), "conv", 2),
        ("entry_block2", (256, 256, 256), "conv", 2),
        ("entry_block3", (728, 728, 728), "conv", 2),
    ]
    + [(f"middle_block{i}", (728, 728, 728), "sum", 1) for i in range(1, MIDDLE_BLOCKS + 1)]
    + [
        ("exit_block1", (728, 1024, 1024), "conv", 2),
        ("exit_block2", (1536, 1536, 2048), "none", 1),
    ]
)
LOW_LEVEL_BLOCK = "entry_block2"  # its second unit's output, at output stride 4, feeds the decoder


def _bn(x, name, relu=False):
    x = keras.layers.BatchNormalization(name=f"{name}_bn", **BN)(x)
    return keras.layers.ReLU(name=f"{name}_relu")(x) if relu else x


def _conv_bn(x, filters, size, name, strides=1, relu=True):
    x = keras.layers.Conv2D(filters, size, strides, padding="same", use_bias=False, name=name)(x)
    return _bn(x, name, relu)


def _separable(x, filters, name, strides=1, rate=1, relu_first=True, relu_after=False):
    """Depthwise 3x3 (atrous) + BN + pointwise 1x1 + BN; ReLU placement as DeepLab does it."""
    if relu_first:
        x = keras.layers.ReLU(name=f"{name}_relu_in")(x)
    x = keras.layers.DepthwiseConv2D(
        3, strides, padding="same", dilation_rate=rate, use_bias=False, name=f"{name}_depthwise"
    )(x)
    x = _bn(x, f"{name}_depthwise", relu=relu_after)
    x = keras.layers.Conv2D(filters, 1, use_bias=False, name=f"{name}_pointwise")(x)
    return _bn(x, f"{name}_pointwise", relu=relu_after)


def _xception_block(x, name, depths, shortcut, stride, rate):
    residual, low_level = x, None
    for unit, depth in enumerate(depths):
        unit_stride = stride if unit == 2 else 1
        residual = _separable(residual, depth, f"{name}_sep{unit + 1}", unit_stride, rate)
        if unit == 1:
            low_level = residual
    if shortcut == "conv":
        x = _conv_bn(x, depths[-1], 1, f"{name}_shortcut", strides=stride, relu=False)
        residual = keras.layers.Add(name=f"{name}_add")([residual, x])
    elif shortcut == "sum":
        residual = keras.layers.Add(name=f"{name}_add")([residual, x])
    return residual, low_level


def _xception65(inputs, middle_blocks=MIDDLE_BLOCKS):
    """Return (features at OUTPUT_STRIDE, low-level features at stride 4), with the first
    `middle_blocks` middle-flow blocks."""
    if not 1 <= middle_blocks <= MIDDLE_BLOCKS:
        raise ValueError(f"middle_blocks must be 1 to {MIDDLE_BLOCKS}; received {middle_blocks}")
    dropped = {f"middle_block{i}" for i in range(middle_blocks + 1, MIDDLE_BLOCKS + 1)}
    x = _conv_bn(inputs, 32, 3, "entry_conv1", strides=2)
    x = _conv_bn(x, 64, 3, "entry_conv2")
    current_stride, rate, low_level = 2, 1, None
    for name, depths, shortcut, stride in (b for b in _BLOCKS if b[0] not in dropped):
        if current_stride * stride > OUTPUT_STRIDE:
            rate *= stride  # keep the resolution, widen the receptive field instead
            stride = 1
        x, block_low = _xception_block(x, name, depths, shortcut, stride, rate)
        current_stride *= stride
        if name == LOW_LEVEL_BLOCK:
            low_level = block_low
    return x, low_level


def _resize(x, like, name):
    height, width = like.shape[1], like.shape[2]
    return keras.layers.Resizing(height, width, interpolation="bilinear", name=name)(x)


def _aspp(features):
    pooled = keras.layers.GlobalAveragePooling2D(keepdims=True, name="aspp_pool")(features)
    pooled = _conv_bn(pooled, 256, 1, "aspp_pool_conv")
    branches = [_resize(pooled, features, "aspp_pool_resize"), _conv_bn(features, 256, 1, "aspp0")]
    for i, rate in enumerate(ASPP_RATES, start=1):
        branches.append(
            _separable(features, 256, f"aspp{i}", rate=rate, relu_first=False, relu_after=True)
        )
    x = keras.layers.Concatenate(name="aspp_concat")(branches)
    x = _conv_bn(x, 256, 1, "aspp_projection")
    return keras.layers.Dropout(0.1, name="aspp_dropout")(x)


def build(
    resolution: int, batch: int, classes: int, middle_blocks: int = MIDDLE_BLOCKS
) -> keras.Model:
    inputs = keras.Input((resolution, resolution, 3), batch_size=batch, name="images")
    features, low_level = _xception65(inputs, middle_blocks)
    x = _aspp(features)
    low = _conv_bn(low_level, 48, 1, "decoder_low_level")
    x = keras.layers.Concatenate(name="decoder_concat")([_resize(x, low, "decoder_upsample"), low])
    for i in (1, 2):
        x = _separable(x, 256, f"decoder_conv{i}", relu_first=False, relu_after=True)
    logits = keras.layers.Conv2D(classes, 1, name="logits")(x)
    logits = _resize(logits, inputs, "logits_upsample")
    return keras.Model(inputs, logits, name="deeplabv3plus_xception65")
