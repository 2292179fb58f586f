"""Models the suite does not use, shaped unlike its four workloads (issue 43): builders for
benchmarks/lms_emulated.py's custom cases.

- `wavenet`: dilated causal Conv1D layers with gated tanh x sigmoid units, residual and skip
  connections (the skips summed): long 1D activations, many of equal size.
- `fanout`: one feature map read by many parallel branches whose outputs are summed: in the
  gradient the sum's gradient fans out to every branch, which a level sort puts on one level.
- `gru`: two stacked GRUs over a token sequence (While loops on the CPU).
- `c3d`: a C3D-style video net (Conv3D, pooling over time and space).
- `mixer`: an MLP-Mixer (patch embedding, token- and channel-mixing MLPs).
"""


def wavenet_classifier(samples: int, batch: int, channels=64, skip=64, layers=12, classes=256):
    """A WaveNet-style next-sample model: per layer a dilated causal Conv1D (dilation 1, 2, 4,
    ... 512, again from 1) split into a tanh and a sigmoid half, their product projected to a
    residual and a skip; the skips summed, then two 1x1 convolutions to `classes` per sample."""
    import keras

    audio = keras.Input((samples, 1), batch_size=batch)
    x = keras.layers.Conv1D(channels, 2, padding="causal")(audio)
    skips = []
    for layer in range(layers):
        dilation = 2 ** (layer % 10)
        h = keras.layers.Conv1D(2 * channels, 2, dilation_rate=dilation, padding="causal")(x)
        gate = keras.layers.Activation("tanh")(h[..., :channels]) * keras.layers.Activation(
            "sigmoid"
        )(h[..., channels:])
        x = x + keras.layers.Conv1D(channels, 1)(gate)
        skips.append(keras.layers.Conv1D(skip, 1)(gate))
    y = keras.layers.Activation("relu")(keras.layers.Add()(skips))
    y = keras.layers.Conv1D(skip, 1, activation="relu")(y)
    y = keras.layers.Conv1D(classes, 1)(y)
    return keras.Model(audio, keras.layers.GlobalAveragePooling1D()(y)[:, :10])


def fanout_classifier(resolution: int, batch: int, width=32, branches=12):
    """A stem, then `branches` parallel 3x3 convolutions (each its own dilation) of one feature
    map, summed (a sum whose gradient every branch reads), twice."""
    import keras

    images = keras.Input((resolution, resolution, 3), batch_size=batch)
    x = keras.layers.Conv2D(width, 3, padding="same", activation="relu")(images)
    for _ in range(2):
        outs = [
            keras.layers.Conv2D(width, 3, padding="same", dilation_rate=1 + b % 4)(x)
            for b in range(branches)
        ]
        x = keras.layers.Activation("relu")(keras.layers.Add()(outs))
    x = keras.layers.GlobalAveragePooling2D()(x)
    return keras.Model(images, keras.layers.Dense(10)(x))


def gru_classifier(length: int, batch: int, width=256, vocabulary=4096):
    """Two stacked GRUs over `length` tokens, a next-token softmax over `vocabulary` at each
    position (pooled to 10 scores for the suite's loss)."""
    import keras

    tokens = keras.Input((length,), batch_size=batch, dtype="int32")
    x = keras.layers.Embedding(vocabulary, width)(tokens)
    x = keras.layers.GRU(width, return_sequences=True)(x)
    x = keras.layers.GRU(width, return_sequences=True)(x)
    x = keras.layers.Dense(vocabulary)(x)
    return keras.Model(tokens, keras.layers.GlobalAveragePooling1D()(x)[:, :10])


def c3d_classifier(resolution: int, batch: int, frames=16, base=32):
    """A C3D-style video net over `frames` frames of `resolution`^2: 3x3x3 convolutions,
    pooling space first, then time and space."""
    import keras

    clips = keras.Input((frames, resolution, resolution, 3), batch_size=batch)
    x = keras.layers.Conv3D(base, 3, padding="same", activation="relu")(clips)
    x = keras.layers.MaxPooling3D((1, 2, 2))(x)
    for level, convs in enumerate((1, 2, 2)):
        for _ in range(convs):
            filters = base * 2 ** (level + 1)
            x = keras.layers.Conv3D(filters, 3, padding="same", activation="relu")(x)
        x = keras.layers.MaxPooling3D(2)(x)
    x = keras.layers.GlobalAveragePooling3D()(x)
    return keras.Model(clips, keras.layers.Dense(10)(x))


def mixer_classifier(resolution: int, batch: int, patch=16, width=256, blocks=8):
    """An MLP-Mixer: patches embedded by a strided convolution, then blocks of a token-mixing
    MLP (over patches) and a channel-mixing MLP, each after a layer norm and added back."""
    import keras

    images = keras.Input((resolution, resolution, 3), batch_size=batch)
    tokens = (resolution // patch) ** 2
    x = keras.layers.Conv2D(width, patch, strides=patch)(images)
    x = keras.layers.Reshape((tokens, width))(x)
    for _ in range(blocks):
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.Permute((2, 1))(y)
        y = keras.layers.Dense(2 * tokens, activation="gelu")(y)
        y = keras.layers.Permute((2, 1))(keras.layers.Dense(tokens)(y))
        x = x + y
        y = keras.layers.LayerNormalization()(x)
        y = keras.layers.Dense(4 * width, activation="gelu")(y)
        x = x + keras.layers.Dense(width)(y)
    x = keras.layers.GlobalAveragePooling1D()(keras.layers.LayerNormalization()(x))
    return keras.Model(images, keras.layers.Dense(10)(x))


# builder, and the input's kind: "tokens", "audio", "video" or "image"
OUTSIDE = {
    "wavenet": (wavenet_classifier, "audio"),
    "fanout": (fanout_classifier, "image"),
    "gru": (gru_classifier, "tokens"),
    "c3d": (c3d_classifier, "video"),
    "mixer": (mixer_classifier, "image"),
}
