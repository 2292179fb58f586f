"""What Grappler does to a rewritten step on a GPU, replayed on any machine.

Some of Grappler's passes act only on devices of type GPU: the layout optimizer (fp32
convolutions to NCHW, with transposes where a tensor crosses to the host) and the memory
optimizer's swapping pass (its own `_CopyFromGpuToHost`/`_CopyFromHostToGpu` pairs where its
static estimate exceeds the device's memory). Neither can run on the two logical CPU devices of
the two-device mode, so this module runs Grappler itself (`tf_optimizer.OptimizeGraph`, the C++
meta optimizer) over a virtual cluster of a CPU and a GPU `DeviceProperties`, on the rewritten
step's graph with its nodes placed as TensorFlow's placer places them (unplaced ops on the GPU,
LMS's host ops on the CPU), and the step's outputs and control outputs as the nodes to preserve
(the FunctionDef's returns and control returns reach Grappler that way). Inside a function
Grappler runs after placement and before partitioning, so this is the graph a GPU would run.

`replay` with LMS's configuration (lms/_tf_private.py `lms_step_config`) must keep every LMS op,
add no Grappler swap and no layout transpose; with TensorFlow's default configuration it shows
what LMS turns off (tests/lms/observe/test_placement.py).
"""

from dataclasses import asdict, dataclass

from lms import _tf_private
from lms.observe.placement import kept_lms_ops

CPU = "/job:localhost/replica:0/task:0/device:CPU:0"
GPU = "/job:localhost/replica:0/task:0/device:GPU:0"


@dataclass(frozen=True)
class ReplayReport:
    """What Grappler kept and added on a virtual GPU (module docstring)."""

    config: str  # "lms" or "default"
    lms_ops: int  # LMS ops in the step
    removed: tuple  # LMS ops Grappler removed
    grappler_swaps: tuple  # nodes of Grappler's swapping pass
    transposes: tuple  # transposes of the layout optimizer
    nchw_convolutions: int  # convolutions the layout optimizer turned to NCHW

    @property
    def ok(self) -> bool:
        return not (self.removed or self.grappler_swaps or self.transposes)

    def as_dict(self) -> dict:
        return {**asdict(self), "ok": self.ok}


def replay(graph, memory_bytes: int, config: str = "lms", architecture: str = "8.0"):
    """Grappler on `graph` (a rewritten step's FuncGraph) as on a GPU of `memory_bytes` with
    compute capability `architecture`; `config` "lms" is how LMS runs its steps, "default"
    TensorFlow's defaults. Returns a `ReplayReport`."""
    kept = [op.name for op in kept_lms_ops(graph)]
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.device = CPU if "CPU" in node.device.upper() else GPU
    fetches = [t.op.name for t in graph.outputs] + [op.name for op in graph.control_outputs]
    serialized = _tf_private.default_call_config()
    step_config = _tf_private.lms_step_config(serialized) if config == "lms" else None
    optimized = _tf_private.grappler_optimize(
        graph_def, fetches, memory_bytes, architecture, step_config
    )
    names = {node.name for node in optimized.node}
    return ReplayReport(
        config,
        len(kept),
        tuple(name for name in kept if name not in names),
        tuple(n.name for n in optimized.node if n.op.startswith("_CopyFrom")),
        tuple(
            n.name for n in optimized.node if n.op == "Transpose" and "LayoutOptimizer" in n.name
        ),
        sum(
            1
            for n in optimized.node
            if n.op.startswith("Conv") and n.attr["data_format"].s == b"NCHW"
        ),
    )


def grappler_replays(graph, memory_bytes: int) -> dict:
    """Both replays of `graph` as plain data: {"lms": ..., "default": ...}."""
    return {config: replay(graph, memory_bytes, config).as_dict() for config in ("lms", "default")}


def _layout_transpose(node) -> bool:
    return node.op == "Transpose" and "LayoutOptimizer" in node.name
