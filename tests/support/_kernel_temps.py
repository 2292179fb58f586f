"""Run by test_kernels in a fresh process (TF_CPU_ALLOCATOR_USE_BFC=true, TF_ENABLE_ONEDNN_OPTS as
the test sets it): the temporaries TensorFlow's CPU kernels allocate for a set of convolution
gradients and pooling ops, from the profiler's allocator events, beside what lms/graph/kernels.py
models for the same graph with the kernels this process computes with.

Prints one JSON line: {"kernels", "threads", "l3", "ops": {name: {"measured", "modelled",
"eigen"}}}, "measured" being the most bytes the op's own temporaries held at once.
"""

import glob
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import tensorflow as tf  # noqa: E402

import lms  # noqa: E402
from lms import _tf_private  # noqa: E402
from lms.graph import cpu_host, kernels  # noqa: E402

raw = tf.raw_ops


def tensor(*shape, dtype=tf.float32):
    return tf.cast(tf.random.stateless_uniform(shape, (1, 2)), dtype)


def conv2d_gradients(name, batch, size, channels, out_channels, k, dtype=tf.float32):
    x = tensor(batch, size, size, channels, dtype=dtype)
    w = tensor(k, k, channels, out_channels, dtype=dtype)
    dy = tensor(batch, size, size, out_channels, dtype=dtype)
    strides = [1, 1, 1, 1]

    def ops():
        return [
            raw.Conv2DBackpropInput(
                input_sizes=tf.shape(x),
                filter=w,
                out_backprop=dy,
                strides=strides,
                padding="SAME",
                name=f"{name}_input",
            ),
            raw.Conv2DBackpropFilter(
                input=x,
                filter_sizes=tf.shape(w),
                out_backprop=dy,
                strides=strides,
                padding="SAME",
                name=f"{name}_filter",
            ),
            raw.Conv2D(input=x, filter=w, strides=strides, padding="SAME", name=f"{name}_forward"),
        ]

    return ops


def conv3d_gradient(name, kind, input_shape, filter_shape, padding="SAME"):
    x, w = tensor(*input_shape), tensor(*filter_shape)
    strides = [1, 1, 1, 1, 1]
    dy = tf.zeros(raw.Conv3D(input=x, filter=w, strides=strides, padding=padding).shape)

    def ops():
        if kind == "input":
            return [
                raw.Conv3DBackpropInputV2(
                    input_sizes=tf.shape(x),
                    filter=w,
                    out_backprop=dy,
                    strides=strides,
                    padding=padding,
                    name=name,
                )
            ]
        return [
            raw.Conv3DBackpropFilterV2(
                input=x,
                filter_sizes=tf.shape(w),
                out_backprop=dy,
                strides=strides,
                padding=padding,
                name=name,
            )
        ]

    return ops


def max_pool_gradient(name, batch, size, channels):
    x = tensor(batch, size, size, channels)
    window, strides = [1, 3, 3, 1], [1, 2, 2, 1]
    y = raw.MaxPool(input=x, ksize=window, strides=strides, padding="SAME")
    dy = tf.ones_like(y)

    def ops():
        return [
            raw.MaxPoolGrad(
                orig_input=x,
                orig_output=y,
                grad=dy,
                ksize=window,
                strides=strides,
                padding="SAME",
                name=name,
            )
        ]

    return ops


CASES = [
    conv2d_gradients("one_by_one", 4, 48, 64, 64, 1),  # filter: a 27-image shard, 15.2 MiB
    conv2d_gradients("three_by_three", 4, 24, 64, 64, 3),  # input: by threads, 1.3 or 25 MiB
    conv2d_gradients("small", 8, 8, 32, 32, 3),  # 265-image shards for 8 images
    conv2d_gradients("half", 4, 24, 64, 64, 3, tf.float16),  # oneDNN takes half on few CPUs
    conv3d_gradient("volume_input", "input", [1, 16, 16, 16, 8], [3, 3, 3, 8, 16]),
    conv3d_gradient("volume_input_fallback", "input", [2, 16, 16, 16, 16], [3, 3, 3, 16, 16]),
    conv3d_gradient("volume_filter_fallback", "filter", [1, 16, 16, 16, 8], [3, 3, 3, 8, 16]),
    # one output voxel per image: a shard of about L3 / 37 KiB images (the probe's kind)
    conv3d_gradient("volume_filter", "filter", [8, 2, 2, 2, 1], [2, 2, 2, 1, 1024], "VALID"),
    max_pool_gradient("max_pool_grad", 4, 48, 32),
]


def temporaries_by_op(logdir: str) -> dict:
    """Per op name, the most bytes its temporaries held at once."""
    path = glob.glob(f"{logdir}/**/*.xplane.pb", recursive=True)[-1]
    space = _tf_private.xplane_pb2().XSpace()
    with open(path, "rb") as file:
        space.ParseFromString(file.read())
    events = []
    for plane in space.planes:
        names, stats = plane.event_metadata, plane.stat_metadata
        for line in plane.lines:
            for event in line.events:
                kind = names[event.metadata_id].name
                if kind not in ("MemoryAllocation", "MemoryDeallocation"):
                    continue
                values = {}
                for stat in event.stats:
                    key = stats[stat.metadata_id].name
                    if stat.str_value or stat.ref_value:
                        values[key] = stat.str_value or stats[stat.ref_value].name
                    else:
                        values[key] = stat.int64_value or stat.uint64_value
                time = line.timestamp_ns * 1000 + event.offset_ps
                events.append((time, kind == "MemoryAllocation", values))
    events.sort(key=lambda e: e[0])
    live, held, owner = {}, {}, {}
    for _, allocation, values in events:
        address = values.get("addr")
        if allocation:
            if values.get("region_type") != "temp":
                continue
            op = values.get("tf_op", "")
            live.setdefault(op, {})[address] = values.get("requested_bytes", 0)
            owner[address] = op
            held[op] = max(held.get(op, 0), sum(live[op].values()))
        elif address in owner:
            live[owner.pop(address)].pop(address, None)
    return held


def main() -> None:
    makers = CASES

    @tf.function
    def step():
        return [output for make in makers for output in make()]

    concrete = step.get_concrete_function()
    step()  # kernels are created outside the trace
    with tempfile.TemporaryDirectory() as logdir:
        tf.profiler.experimental.start(logdir)
        step()
        tf.profiler.experimental.stop()
        held = temporaries_by_op(logdir)
    analysis = lms.internal.analyze(concrete.graph, quiet=True)
    analysis.kernels = cpu_host.cpu_kernels()
    modelled = kernels.temporaries(analysis, analysis.kernels)
    ops = {}
    for index, op in enumerate(analysis.ops):
        if op.type.startswith(("Conv", "MaxPoolGrad")):
            measured = max((b for name, b in held.items() if name.endswith(op.name)), default=0)
            ops[op.name] = {
                "type": op.type,
                "measured": measured,
                "modelled": modelled.bytes[index],
                "eigen": modelled.side_by_side[index],
            }
    l3 = cpu_host.eigen_l3_bytes() if analysis.kernels == "eigen" else None
    print(
        json.dumps(
            {
                "kernels": analysis.kernels,
                "threads": cpu_host.intra_op_threads(),
                "l3": l3,
                "half_on_onednn": tf.float16 in cpu_host.onednn_dtypes(),
                "ops": ops,
            }
        )
    )


if __name__ == "__main__":
    main()
