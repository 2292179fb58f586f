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


def models_table(workload: str | None, resolution, batch, precision: str) -> str:
    """`inv models`: one row per workload (or `workload` only) at `resolution` (default: each
    workload's reference) and `batch`."""
    from tabulate import tabulate

    from suite.errors import SuiteError
    from suite.units import format_bytes, positive_int
    from suite.workloads import PRECISIONS, WORKLOADS

    if precision not in PRECISIONS:
        raise SuiteError(f"--precision {precision!r}: one of {', '.join(PRECISIONS)}")
    batch = positive_int("batch", batch)
    names = [get_workload(workload).name] if workload else list(WORKLOADS)
    rows = []
    for name in names:
        size = positive_int("resolution", resolution) if resolution else None
        size = size or WORKLOADS[name].reference_resolution
        s = model_summary(name, size, batch, precision)
        largest = s["largest_activation"]
        rows.append(
            [
                name,
                size,
                s["batch"],
                s["precision"],
                f"{s['parameters']:,}",
                largest["layer"],
                "x".join(map(str, largest["shape"])),
                format_bytes(largest["bytes"]),
            ]
        )
    headers = [
        "workload",
        "resolution",
        "batch",
        "precision",
        "parameters",
        "largest activation",
        "shape",
        "size",
    ]
    return tabulate(rows, headers, tablefmt="simple")
