"""Every private TensorFlow API `lms` relies on, in one place (tested on TF 2.14.1 and newest).

- `Operation._update_input(index, tensor)`: reroute one input of an op already in a graph.
- `Operation._is_stateful`: whether an op has side effects (a split's static bounds are only
  computed from stateless constants).
- `Operation._add_control_input(op)`: add a control dependency to an existing op.
- `Operation._set_device(device)`: place an op already in a graph.
- `Graph._create_op_internal(type, inputs, dtypes, attrs)`: a copy of an op (its type and
  attributes as they are) over other inputs, for a split op's pieces.
- `Operation._control_outputs`, `_remove_all_control_inputs()`, `_add_control_inputs(ops)`:
  move the control dependencies on one op to another.
- `ConcreteFunction.from_func_graph(graph, function_type, attrs)`: a new callable from an edited
  FuncGraph, sharing the original's captured variables.
- `Graph._get_function(name)`, `Graph._add_function_recursive(function)`,
  `atomic_function.from_function_def(definition, function_type)`, `Operation._set_attr`,
  a loop body copied, edited and registered under a new name, and a
  StatelessWhile remade as a While (lms/device/list_streams.py).
- `_pywrap_util_port.IsMklEnabled()`: whether oneDNN's CPU kernels and graph passes are on.
- `tsl.profiler.protobuf.xplane_pb2`: the profiler's XSpace proto (not exported as tf.*).
- `context.context().function_call_options` (`FunctionCallOptions(config_proto=...)`): the
  Grappler configuration a function call is optimized with, per thread; TF2 has no public
  setting of the memory optimizer's level.
- `context.enable_run_metadata()` / `export_run_metadata()`: a call's post-optimization and
  partition graphs (`RunMetadata.function_graphs`).
- `Function._jit_compile`: whether a tf.function compiles with XLA.
- `grappler.tf_optimizer.OptimizeGraph` over a `grappler.cluster.Cluster` of named virtual
  devices: Grappler's meta optimizer on a graph, as on a GPU this machine lacks.
"""

import contextlib
import functools

from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2
from tensorflow.python.eager import context as _context
from tensorflow.python.eager.polymorphic_function import concrete_function as _concrete
from tensorflow.python.framework import ops as _ops
from tensorflow.python.util import _pywrap_util_port


def update_input(op, index: int, tensor) -> None:
    op._update_input(index, tensor)


def is_stateful(op) -> bool:
    return bool(op._is_stateful)


def add_control_input(op, control_op) -> None:
    op._add_control_input(control_op)


def move_control_outputs(op, replacement) -> None:
    """Every op that waits for `op` (a control input) waits for `replacement` instead."""
    for waiter in list(op._control_outputs):
        kept = [c for c in waiter.control_inputs if c is not op]
        waiter._remove_all_control_inputs()
        waiter._add_control_inputs(kept + [replacement])


def copy_op(op, inputs, overrides=None):
    """A copy of `op` (its type and attributes, `overrides` replacing some) over `inputs`, made
    in the current graph (`op`'s, or a loop body's inside it: lms/split/looped.py): its first
    output."""
    attrs = {key: op.node_def.attr[key] for key in op.node_def.attr} | (overrides or {})
    dtypes = [t.dtype for t in op.outputs]
    graph = _ops.get_default_graph()
    return graph._create_op_internal(op.type, inputs, dtypes, attrs=attrs).outputs[0]


def set_device(op, device: str) -> None:
    op._set_device(device)


def set_int_attr(op, name: str, value: int) -> None:
    from tensorflow.core.framework import attr_value_pb2

    op._set_attr(name, attr_value_pb2.AttrValue(i=value))


def concrete_function_from_graph(original, graph):
    """A ConcreteFunction over `graph` (edited in place) with `original`'s signature."""
    return _concrete.ConcreteFunction.from_func_graph(
        graph, original.function_type, original._attrs
    )


def library_function(graph, op, attribute: str):
    """The function of `graph`'s library that `op`'s function attribute names (an
    AtomicFunction: `cached_definition`, `function_type`)."""
    return graph._get_function(op.get_attr(attribute).name)


def add_function(graph, definition, function_type) -> None:
    """Register the FunctionDef `definition` (a new name) with the eager context and add it to
    `graph`'s library, as while_v2 adds the bodies it makes."""
    from tensorflow.python.eager.polymorphic_function import atomic_function

    graph._add_function_recursive(atomic_function.from_function_def(definition, function_type))


def set_function_attr(op, attribute: str, name: str) -> None:
    """Point `op`'s function attribute (a While's "body") at the library function `name`."""
    from tensorflow.core.framework import attr_value_pb2

    op._set_attr(attribute, attr_value_pb2.AttrValue(func=attr_value_pb2.NameAttrList(name=name)))


def set_type_attr(op, name: str, dtype) -> None:
    """Set a type attribute of an op in place (one its inputs' and outputs' types do not
    depend on: the Python op's dtypes are not recomputed)."""
    from tensorflow.core.framework import attr_value_pb2

    op._set_attr(name, attr_value_pb2.AttrValue(type=dtype.as_datatype_enum))


def onednn_enabled() -> bool:
    return bool(_pywrap_util_port.IsMklEnabled())


def xplane_pb2():
    """The module of the profiler's XSpace proto, where this TensorFlow keeps it."""
    try:
        from tensorflow.tsl.profiler.protobuf import xplane_pb2 as module
    except ImportError:  # older layouts
        from tensorflow.core.profiler.protobuf import xplane_pb2 as module
    return module


_Rewriter = rewriter_config_pb2.RewriterConfig


@functools.lru_cache(maxsize=8)
def lms_step_config(serialized: bytes | None):
    """A function call's serialized ConfigProto with the Grappler settings LMS steps run with:

    - the memory optimizer at SCHEDULING_HEURISTICS: its AddN scheduling stays (as TFLMSv2's
      README asked), its swapping pass goes: on a GPU it inserts swaps of its own wherever its
      static estimate exceeds the device, which is every LMS step (desk check M1);
    - the layout optimizer off: in fp32 it converts a GPU step's convolutions to NCHW and wraps
      every tensor crossing to the host (every swap, every piece) in a full-size transpose on the
      device, which no plan counts (desk check M2).

    Both passes act on GPU devices only: on the CPU the step is optimized as before. Returns a
    ConfigProto (read-only: cached per configuration)."""
    config = config_pb2.ConfigProto()
    config.ParseFromString(serialized or b"")
    rewrite = config.graph_options.rewrite_options
    if rewrite.memory_optimization != _Rewriter.NO_MEM_OPT:
        rewrite.memory_optimization = _Rewriter.SCHEDULING_HEURISTICS
    rewrite.layout_optimizer = _Rewriter.OFF
    return config


@contextlib.contextmanager
def lms_call_options():
    """Function calls in this thread are optimized with `lms_step_config` (restored after)."""
    ctx = _context.context()
    saved = ctx.function_call_options
    ctx.function_call_options = _context.FunctionCallOptions(
        executor_type=saved.executor_type,
        config_proto=lms_step_config(saved.config_proto_serialized),
    )
    try:
        yield
    finally:
        ctx.function_call_options = saved


@contextlib.contextmanager
def run_metadata():
    """Collect the run metadata of the calls inside (yields a list that holds the
    `RunMetadata` proto once the block ends): post-optimization and partition graphs."""
    found = []
    # what TensorFlow gathered since the last export (it goes on storing the graphs of functions
    # instantiated after an earlier block, metadata off or not) is dropped: export clears it
    _context.export_run_metadata()
    _context.enable_run_metadata()
    try:
        yield found
        found.append(_context.export_run_metadata())
    finally:
        _context.disable_run_metadata()


def default_call_config() -> bytes:
    """The serialized ConfigProto a function call of this thread is optimized with now."""
    return _context.context().function_call_options.config_proto_serialized


def grappler_optimize(graph_def, fetches, memory_bytes: int, architecture: str, config=None):
    """Grappler's meta optimizer on `graph_def` (nodes placed on .../device:CPU:0 and
    .../device:GPU:0) over a virtual cluster of that CPU and a GPU of `memory_bytes` and compute
    capability `architecture`; `fetches` are preserved. `config`: a ConfigProto (None:
    TensorFlow's defaults). Returns the optimized GraphDef."""
    from tensorflow.core.protobuf import device_properties_pb2, meta_graph_pb2
    from tensorflow.python.grappler import cluster as gcluster
    from tensorflow.python.grappler import tf_optimizer

    devices = [
        device_properties_pb2.NamedDevice(
            name="/job:localhost/replica:0/task:0/device:CPU:0",
            properties=device_properties_pb2.DeviceProperties(
                type="CPU", frequency=2000, num_cores=2, memory_size=64 * 2**30
            ),
        ),
        device_properties_pb2.NamedDevice(
            name="/job:localhost/replica:0/task:0/device:GPU:0",
            properties=device_properties_pb2.DeviceProperties(
                type="GPU",
                vendor="NVIDIA",
                model="virtual",
                frequency=1400,
                num_cores=80,
                environment={"architecture": architecture, "cuda": "12000", "cudnn": "9000"},
                memory_size=int(memory_bytes),
                bandwidth=900 * 10**6,
            ),
        ),
    ]
    meta_graph = meta_graph_pb2.MetaGraphDef(graph_def=graph_def)
    meta_graph.collection_def["train_op"].node_list.value.extend(fetches)
    if config is None:
        config = config_pb2.ConfigProto()
    cluster = gcluster.Cluster(devices=devices)
    try:
        return tf_optimizer.OptimizeGraph(config, meta_graph, cluster=cluster)
    finally:
        cluster.Shutdown()


def jit_compiled(function) -> bool:
    """Whether a tf.function compiles with XLA (`jit_compile=True`)."""
    return bool(getattr(function, "_jit_compile", False))
