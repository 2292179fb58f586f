"""Size facts of a built workload: parameter count and its largest activation (`inv models`)."""

import math

import tensorflow as tf

from suite.workloads import build_workload, get_workload


def _outputs(layer):
    output = layer.output
    return output if isinstance(output, list | tuple) else [output]


def model_summary(name: str, resolution: int, batch: int, precision: str = "fp32") -> dict:
    """Parameters and the largest single layer output (bytes at `batch`, in its dtype)."""
    info = get_workload(name)
    model, _ = build_workload(name, resolution, batch, precision)
    largest = {"layer": None, "shape": None, "bytes": 0}
    for layer in model.layers:
        for tensor in _outputs(layer):
            shape = [batch if d is None else int(d) for d in tensor.shape]
            size = math.prod(shape) * tf.as_dtype(tensor.dtype).size
            if size > largest["bytes"]:
                largest = {"layer": layer.name, "shape": shape, "bytes": size}
    return {
        "workload": name,
        "title": info.title,
        "resolution": resolution,
        "batch": batch,
        "precision": precision,
        "parameters": int(model.count_params()),
        "layers": len(model.layers),
        "largest_activation": largest,
    }
