"""A traced training step as the planner and simulator see it: ops, tensor sizes, buffers,
categorized topological levels.

Works on the step's `FuncGraph` (forward, gradients and optimizer update in one flat graph). Level
k holds every op whose data and control inputs all sit in lower levels (TFLMSv2's categorized
topological sort). Sizes are static: dtype size x shape, an unknown leading dimension taken as the
batch size. Ops that forward their input's buffer (Identity, Reshape, ...) make no new buffer: the
simulator extends the input's lifetime instead.
"""

import contextlib
import enum
import gc
import logging
import math
from dataclasses import dataclass, field
from typing import NamedTuple

import tensorflow as tf

from lms.graph.names import SPLIT_SCOPE

log = logging.getLogger("lms")
GiB, MiB = 2**30, 2**20

# Outputs that share input 0's buffer (TensorFlow forwards it) instead of allocating.
ALIAS_OPS = frozenset(
    {
        "Identity",
        "IdentityN",
        "Reshape",
        "ExpandDims",
        "Squeeze",
        "StopGradient",
        "Snapshot",
        "EnsureShape",
        "PreventGradient",
        "Bitcast",
        "CheckNumerics",
    }
)
# Outputs that are not new device buffers of the step: variable reads alias the variable, inputs
# and captures are held by the caller, constants are tiny and made once.
NO_BUFFER_OPS = frozenset({"Const", "ReadVariableOp", "VarHandleOp", "Placeholder", "HostConst"})
# The host store's py_funcs (lms/device/host_pieces.py) return host arrays: not device buffers.
PY_FUNC_OPS = frozenset({"PyFunc", "EagerPyFunc"})
HOST_STORE_SCOPES = (f"{SPLIT_SCOPE}/",)
# Aliases that are views of their input's bytes in another shape: swapped like the buffer they
# view (a swap-out copies the same bytes), since the readers of a view keep its buffer alive.
# Keras runs a Conv1D as ExpandDims + Conv2D and a Dense over a sequence as Reshape + MatMul: the
# gradient's filter products read the views, so the buffer under them could not be swapped
# (WaveNet 16000 samples b4, everything swapped: 583 MiB simulated, floor 143).
VIEW_OPS = frozenset({"Reshape", "ExpandDims", "Squeeze"})
# Reads of a tensor's shape alone: with a fully defined shape Grappler's constant folding makes
# them constants before the step runs, so they keep no buffer alive (lms/graph/passes.py).
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})
# Never swapped (docs/lms.md): besides the above, shape arithmetic and host-side values.
NEVER_SWAP_OPS = NO_BUFFER_OPS | ALIAS_OPS | SHAPE_OPS
NON_DATA_DTYPES = (tf.resource, tf.variant, tf.string)
# (op type, input position) reads that oneDNN's CPU kernels need from the forward op itself: a max
# pool's gradient gets the fast kernel only when it reads its max pool's output directly (oneDNN
# then pairs them through a workspace); fed a swap-in it falls back to TensorFlow's own kernel.
# GoogLeNet 224² b4, everything swapped: 230 ms per step in MaxPoolGrad instead of 12 ms (the
# step 1.7x slower than without LMS; 1.1x with these reads kept), and the 3D U-Net's gradients
# differed by tie-breaking. On a GPU no kernel needs this.
ONEDNN_PAIRED_READS = frozenset({("MaxPoolGrad", 1), ("MaxPool3DGrad", 1)})
# Paired, the forward op also outputs oneDNN's workspace (the argmax, one byte per element of
# its output), held until the gradient reads it: GoogLeNet 224² b4's max pools held 27.5 MiB at
# the measured peak for 21.6 MiB of outputs.
WORKSPACE_BYTES_PER_ELEMENT = 1


class Fact(enum.Enum):
    """What the planner and simulator compute once per analysis, whatever the plan."""

    SCHEDULE = "schedule"
    LIFETIMES = "lifetimes"
    ORDERED_LIFETIMES = "ordered lifetimes"
    TEMPORARIES = "temporaries"
    FOOTPRINT = "footprint"
    ANCESTORS = "ancestors"
    LEVELS = "levels"
    DEPTH_FIRST = "depth-first order"
    ORDER_POSITIONS = "order positions"
    FUSION_HELPERS = "fusion helpers"
    ANCHORS = "anchors"
    NEXT_ANCHORS = "next anchors"
    EXECUTED = "executed"
    HOST_ARRAYS = "host arrays"
    SWAP_OUT_WAITERS = "swap-out waiters"
    BUFFER_MEMBERS = "buffer members"
    NEIGHBOURS = "neighbours"
    FAR_READERS = "far readers"
    FAR_READERS_ORDERED = "far readers, ordered"
    GROUP_FIRSTS = "groups' first positions"
    MODELLED_ARRAYS = "a model's split ops' host arrays"
    AS_LISTS = "facts as Python lists"


class CacheKey(NamedTuple):
    """A key of `Analysis.cache`: the fact, and the kernel set for facts that count kernel
    temporaries (None for the others)."""

    fact: Fact
    kernels: str | None = None


@dataclass
class TensorInfo:
    name: str
    bytes: int
    producer: int  # op index
    consumers: list = field(default_factory=list)  # [(op index, input position)]
    buffer: int = -1  # index of the tensor whose buffer this one lives in (itself if it allocates)
    swappable: bool = False
    paired_with: str = ""  # the op type whose read keeps it on the device (ONEDNN_PAIRED_READS)
    # a loop's accumulated tensor list (a variant): its element's (dtype, shape) when it can be
    # swapped as one stacked tensor (lms/graph/loops.py, lms/device/lists.py), else None
    list_element: tuple | None = None


@dataclass
class OpInfo:
    name: str
    type: str
    inputs: list  # tensor indices
    control_inputs: list  # op indices
    outputs: list  # tensor indices
    level: int = 0
    temp_bytes: int = 0  # what the kernel holds besides its inputs and outputs while it runs
    # the allocations temp_bytes is made of, where known (a loop's or call's body: its buffers
    # at its peak), so that the allocator's model places them as TensorFlow does, one by one
    temp_parts: tuple = ()
    runs: bool = True  # False: TensorFlow prunes it (nothing the step returns or keeps needs it)
    aliases: int = -1  # >= 0: its output is input `aliases` (x * 1, x + 0: see _identity_input)
    constant: bool = False  # Grappler folds it into a Const before the step runs (mark_constants)


@dataclass
class Analysis:
    """The step graph as the planner and simulator see it."""

    graph: object
    ops: list
    tensors: list
    levels: list  # level -> [op index]
    outputs: list  # tensor indices the step returns (live to the end)
    resident_bytes: int  # variables (weights, optimizer slots) and the step's inputs
    variable_bytes: int
    trainable_bytes: int
    input_bytes: int
    largest_op: tuple  # (name, bytes of its inputs + outputs)
    unknown_size_tensors: int
    edges: int
    bypassed: list = field(default_factory=list)  # [(op, input position, tensor it reads now)]
    # the kernels the step runs with, whose temporaries the simulator counts (lms/graph/kernels.py):
    # "onednn", "eigen" or "gpu"
    kernels: str = "onednn"
    # While loops and what their tensor lists keep for the gradient (lms/graph/loops.py), swapped
    # between the loops where they can be (TensorInfo.list_element): [(op name, bytes)], largest
    # first
    loops: list = field(default_factory=list)
    # whether a swapped list is stacked on the device for its swap-out (the emulated device's
    # host store; TensorFlow's copies move it element by element: lms/device/lists.py)
    stacked_lists: bool = True
    # what the step holds in host memory besides swapped tensors: split ops' host arrays and,
    # computing on a GPU, the host's tensors: [(bytes, [op indices that create, fill or read it])]
    host_arrays: list = field(default_factory=list)
    # a copy with split ops modelled, not made (lms/split/modelled.py): its graph is as traced
    modelled: bool = False
    # plan-independent facts, computed once
    cache: dict[CacheKey, object] = field(default_factory=dict, repr=False)

    def as_list(self, name: str, make) -> list:
        """The array `make()` returns (a plan-independent fact of this analysis, under `name`)
        as a Python list, made once: the planner's and simulator's loops index it per swap
        and reader, where a numpy array's scalar indexing is several times slower (ResNet50
        1856²'s model: a plan's 2,000 swap-ins)."""
        lists = self.cache.setdefault(CacheKey(Fact.AS_LISTS), {})
        if name not in lists:
            lists[name] = make().tolist()
        return lists[name]

    def buffer_bytes(self, tensor: int) -> int:
        """The bytes of the buffer `tensor` lives in: what a swap of it moves (a view's are its
        buffer's; its own `bytes` are 0, not to count the buffer twice)."""
        return self.tensors[self.tensors[tensor].buffer].bytes

    def summary(self) -> dict:
        return {
            "vertices": len(self.ops),
            "edges": self.edges,
            "levels": len(self.levels),
            "learning_parameter_bytes": self.trainable_bytes,
            "variable_bytes": self.variable_bytes,
            "input_bytes": self.input_bytes,
            "largest_op": {"name": self.largest_op[0], "bytes": self.largest_op[1]},
            "unknown_size_tensors": self.unknown_size_tensors,
            "kernels": self.kernels,  # whose convolution temporaries were counted
            "loops": [{"name": name, "bytes": size} for name, size in self.loops],
        }


@contextlib.contextmanager
def collector_paused():
    """Python's cyclic garbage collector off while a graph is read or a plan tuned. Both allocate
    objects per op, tensor and plan, and each collection that sets off walks every object the
    process tracks: a traced step and its model are hundreds of thousands (DeepLabV3+ 3200² b1,
    17,864 ops: 0.5 of its 1.1 s of analysis, and one or two full collections of 0.3 s each
    during its tuning). What they make holds no cycles to collect; once allocations resume
    after, the collector runs again as it would have."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@contextlib.contextmanager
def heap_frozen():
    """The objects alive on entry left out of Python's cyclic collections until exit
    (`gc.freeze`), for work that allocates a great deal beside a large heap it does not
    change: splitting's rounds copy the step's analysis for each model (lms/split/modelled.py)
    and the collections that set off walked the traced step's objects each time (ResNet50
    1856² b1: its four models took 1.4-1.7 s, 0.6-0.8 frozen). Unlike `collector_paused`, what
    the work makes and drops is still collected. Left as it is when something else froze
    objects already (their unfreezing is theirs)."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def tensor_bytes(tensor, batch_size: int | None) -> int | None:
    """Static size of a tensor in bytes, or None when its shape is not known."""
    if tensor.dtype in NON_DATA_DTYPES:
        return 0
    shape = tensor.shape
    if shape.rank is None:
        return None
    dims = list(shape.as_list())
    if dims and dims[0] is None and batch_size:
        dims[0] = batch_size
    if any(d is None for d in dims):
        return None
    return math.prod(dims) * tensor.dtype.size
