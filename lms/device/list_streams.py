"""Loop lists streamed through the host store element by element (issue 43, item 3): the forward
`While` body pushes a host handle instead of each element, the gradient `While` body swaps the
popped handle's element back in.

Why: a loop's accumulated tensor lists (lms/graph/loops.py) can be swapped between the loops as
whole lists (lms/device/lists.py), but the gradient `While` is one op that needs all its lists at
once, so one layer's lists are a floor no swap between ops goes below. Two stacked GRUs of 256
over 256 tokens at batch 64 keep 118 MiB of lists for one layer's gradient. Streamed, a list
holds 8-byte handles; each iteration holds its own element while the body runs, and the host
store holds the rest.

How: both bodies are functions of the step's library. Each is copied as a FunctionDef, edited
(its element type becomes int64 handles) and registered under a new name, and its `While` is
pointed at it. The list's `EmptyTensorList` is remade with that element type. A gradient loop is
a `StatelessWhile`: it becomes a `While`, as its body now has the store's stateful py_funcs. The
step is then analysed again, so the plan sees the lists as the handles they now are.

The host store's (the emulated device's) mechanism alone. TensorFlow's copies (a GPU) move a
list across devices element by element already (lms/device/lists.py), and Keras runs LSTMs and
GRUs on a GPU as cuDNN kernels, not as loops.

Costs: a py_func call per iteration each way for all of a loop's lists streamed (about 50 us
each here, the elements' copies far less), so only lists of MIN_ELEMENT_BYTES or more are
streamed, and only when nothing fits otherwise (lms/pipeline.py), a loop at a time
(lms/loop_lists.py).
"""

from dataclasses import dataclass

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, function_pb2

from lms import _tf_private
from lms.device.host_pieces import hold_host_array
from lms.device.nodes import node, type_attr
from lms.graph.loops import (
    LIST_WRITES,
    SHARED_SOURCES,
    WHILE_OPS,
    body_graph,
    passed_source,
    trip_count,
)
from lms.graph.names import STREAM_SCOPE, STREAMED_LISTS, SWAP_IN, SWAP_OUT

MIN_ELEMENT_BYTES = 4096  # smaller elements cost more in py_func calls than they free
HANDLE = tf.int64  # the host store's handle: an int64 vector of one


@dataclass(frozen=True)
class StreamedList:
    """One accumulated list to stream: output `position` of the forward `While` named
    `forward` (filled by its body's `push`), input `gradient_position` of the gradient `While`
    named `gradient` (emptied by its body's `pop`)."""

    forward: str
    position: int
    push: str
    gradient: str
    gradient_position: int
    pop: str
    dtype: tf.DType
    shape: tuple
    bytes: int  # the whole list's: trips x element


def streamable_lists(graph, size_of) -> list[StreamedList]:
    """The lists of `graph`'s loops that can be streamed: one push per iteration of a fully
    defined element of MIN_ELEMENT_BYTES or more (not a variable's or constant's value, not the
    same tensor every iteration), started empty (`EmptyTensorList`), read by one gradient
    `While` alone, whose body pops it once per iteration and passes the rest on.
    `size_of(tensor)`: its bytes, or None.

    Also a list of the previous iteration's value (an RNN's carried state), which the analysis
    sizes as nothing (its elements are those of the output sequence's list: lms/graph/loops.py):
    it keeps them on the device until the gradient pops them, long after that list is gone.
    Two GRUs of 256 over 256 tokens at batch 64, streamed but for these: 31 MiB of states held
    at the measured peak, which the simulation did not count."""
    found = []
    for op in graph.get_operations():
        if op.type not in WHILE_OPS or not trip_count(op):
            continue
        body = body_graph(graph, op, "body")
        if body is None:
            continue
        for k, push in _pushed_lists(body).items():
            value = push.inputs[1]
            element_bytes = size_of(value)
            if not value.shape.is_fully_defined() or value.shape.rank < 1 or not element_bytes:
                continue
            if element_bytes < MIN_ELEMENT_BYTES or k >= len(op.inputs):
                continue
            if op.inputs[k].op.type != "EmptyTensorList" or len(op.inputs[k].consumers()) != 1:
                continue
            readers = op.outputs[k].consumers()
            if len(readers) != 1 or readers[0].type not in WHILE_OPS:
                continue
            gradient = readers[0]
            positions = [j for j, t in enumerate(gradient.inputs) if t is op.outputs[k]]
            pop = _single_pop(graph, gradient, positions)
            if pop is None:
                continue
            shape = tuple(value.shape.as_list())
            trips = trip_count(op)
            found.append(
                StreamedList(
                    op.name,
                    k,
                    push.name,
                    gradient.name,
                    positions[0],
                    pop.name,
                    value.dtype,
                    shape,
                    trips * element_bytes,
                )
            )
    return found


def _pushed_lists(body) -> dict:
    """Per input position of a loop body: its list's one TensorListPushBack, where the list
    gets one push per iteration of a value that changes (not loop-invariant, not a variable's
    or constant's value); lists pushed more than once are left out."""
    position_of = {p.ref(): k for k, p in enumerate(body.inputs)}
    pushes = {}
    for inner in body.get_operations():
        if inner.type in LIST_WRITES:
            k = position_of.get(passed_source(inner.inputs[0]).ref())
            if k is not None:
                pushes.setdefault(k, []).append(inner)
    found = {}
    for k, writes in pushes.items():
        if len(writes) != 1 or writes[0].type != "TensorListPushBack":
            continue
        value = passed_source(writes[0].inputs[1])
        if value.op.type in SHARED_SOURCES or f"/{STREAM_SCOPE}/" in value.op.name:
            continue
        j = position_of.get(value.ref())
        outputs = body.outputs
        carried = passed_source(outputs[j]) if j is not None and j < len(outputs) else None
        if carried is not None and carried.ref() == value.ref():
            continue  # loop-invariant
        found[k] = writes[0]
    return found


def _single_pop(graph, gradient, positions):
    """The one TensorListPopBack of the gradient body that reads input `positions[0]`, its
    only reader but for ops that pass the list on, or None."""
    body = body_graph(graph, gradient, "body")
    if body is None or len(positions) != 1 or positions[0] >= len(body.inputs):
        return None
    placeholder = body.inputs[positions[0]]
    pops, others = [], 0
    for inner in body.get_operations():
        for tensor in inner.inputs:
            if passed_source(tensor).ref() != placeholder.ref() or inner.type == "Identity":
                continue
            if inner.type == "TensorListPopBack" and tensor is inner.inputs[0]:
                pops.append(inner)
            else:
                others += 1
    return pops[0] if len(pops) == 1 and not others else None


def stream_lists(graph, store, lists: list[StreamedList]) -> None:
    """Edit `graph` (a step's FuncGraph) in place so that `lists` go through `store` (a
    `HostStore`) element by element (see the module docstring)."""
    forward, gradient = {}, {}
    for streamed in lists:
        forward.setdefault(streamed.forward, []).append(streamed)
        gradient.setdefault(streamed.gradient, []).append(streamed)
    for name, group in forward.items():
        op = _edit_body(graph, name, group, _push_handles, store)
        for streamed in group:
            _empty_handle_list(graph, op, streamed.position)
    for name, group in gradient.items():
        _edit_body(graph, name, group, _pop_handles, store)
    # the host store holds a list from its forward loop to its gradient loop: the analysis
    # counts it in the host's memory there, as a split op's host array
    for streamed in lists:
        key = f"{streamed.forward}:{streamed.position}"
        for name in (streamed.forward, streamed.gradient):
            hold_host_array(graph.get_operation_by_name(name), key, streamed.bytes)
    setattr(graph, STREAMED_LISTS, getattr(graph, STREAMED_LISTS, 0) + len(lists))


def _edit_body(graph, name: str, group, edit, store):
    """The `While` named `name` with a copy of its body in which `edit(definition, group,
    store)` made the lists of `group` stream; the op."""
    op = graph.get_operation_by_name(name)
    definition = _copy_body(graph, op)
    edit(definition, group, store)
    _use_body(graph, op, definition)
    return op


def _copy_body(graph, op):
    """A copy of the FunctionDef of `op`'s body, under a name of its own."""
    definition = function_pb2.FunctionDef()
    definition.CopyFrom(_tf_private.library_function(graph, op, "body").cached_definition)
    definition.signature.name = f"{definition.signature.name}_lms_streamed"
    return definition


def _nodes(definition) -> dict:
    return {n.name: n for n in definition.node_def}


def _push_handles(definition, group, store) -> None:
    """Each iteration's elements of `group`'s lists go to the host store in one py_func call
    (a call and its hand-off cost about 50 us, an element's copy far less), and each list's push
    takes its element's handle, shaped [1] * the element's rank (a list keeps its element
    shape's rank: see `_empty_handle_list`)."""
    nodes = _nodes(definition)
    pushes = [nodes[streamed.push] for streamed in group]
    device, prefix = pushes[0].device, f"{pushes[0].name}/{STREAM_SCOPE}/"
    sources, dtypes = [push.input[1] for push in pushes], [streamed.dtype for streamed in group]
    made = [store.put_elements_node(f"{prefix}{SWAP_OUT}", sources, dtypes, device)]
    for k, (push, streamed) in enumerate(zip(pushes, group, strict=True)):
        ones = _shape_const(f"{prefix}handle_shape_{k}", [1] * len(streamed.shape), device)
        shaped = _reshape(f"{prefix}handle_{k}", f"{made[0].name}:output:{k}", ones, device)
        made += [ones, shaped]
        push.input[1] = f"{shaped.name}:output:0"
        push.attr["element_dtype"].CopyFrom(type_attr(HANDLE))
    definition.node_def.extend(made)


def _pop_handles(definition, group, store) -> None:
    """Each list's pop gives a handle; one py_func call a iteration gives back the elements of
    all of `group`'s lists, each copied into the allocator (as a swap-in) for its pop's
    readers."""
    nodes = _nodes(definition)
    pops = [nodes[streamed.pop] for streamed in group]
    device, prefix = pops[0].device, f"{pops[0].name}/{STREAM_SCOPE}/"
    vector = _shape_const(f"{prefix}vector", [1], device)
    made, handles = [vector], []
    for k, (pop, streamed) in enumerate(zip(pops, group, strict=True)):
        shape = _shape_const(f"{prefix}element_shape_{k}", [1] * len(streamed.shape), device)
        handle = _reshape(f"{prefix}handle_{k}", f"{pop.name}:tensor:0", vector, device)
        made += [shape, handle]
        handles.append(f"{handle.name}:output:0")
        pop.input[1] = f"{shape.name}:output:0"
        pop.attr["element_dtype"].CopyFrom(type_attr(HANDLE))
    dtypes = [streamed.dtype for streamed in group]
    read = store.get_elements_node(f"{prefix}{SWAP_IN}", handles, dtypes, device)
    renamed = {}
    for k, (pop, streamed) in enumerate(zip(pops, group, strict=True)):
        # The shape first, the copy after: the copy then has the element's static shape, so
        # the analysis counts its buffer in the body's peak (a py_func's output has none).
        known = node(
            f"{prefix}element_{k}",
            "EnsureShape",
            [f"{read.name}:output:{k}"],
            device,
            T=type_attr(streamed.dtype),
            shape=attr_value_pb2.AttrValue(shape=tf.TensorShape(streamed.shape).as_proto()),
        )
        copy = node(
            f"{prefix}copy_{k}", "DeepCopy", [f"{known.name}:output:0"], device, T=known.attr["T"]
        )
        made += [known, copy]
        renamed[f"{pop.name}:tensor:0"] = f"{copy.name}:y:0"
    for reader in definition.node_def:  # (the nodes made are not in it yet)
        reader.input[:] = [renamed.get(name, name) for name in reader.input]
    for key, value in list(definition.ret.items()):
        definition.ret[key] = renamed.get(value, value)
    definition.node_def.extend([*made, read])


def _shape_const(name: str, value, device: str):
    tensor = tf.make_tensor_proto(value, tf.int32)
    value_attr = attr_value_pb2.AttrValue(tensor=tensor)
    return node(name, "Const", [], device, dtype=type_attr(tf.int32), value=value_attr)


def _reshape(name: str, source: str, shape, device: str):
    """The handle `source` reshaped to the Const `shape`."""
    inputs = [source, f"{shape.name}:output:0"]
    return node(name, "Reshape", inputs, device, T=type_attr(HANDLE), Tshape=type_attr(tf.int32))


def _use_body(graph, op, definition) -> None:
    """Register `definition` in `graph`'s library and make it `op`'s body."""
    like = _tf_private.library_function(graph, op, "body")
    _tf_private.add_function(graph, definition, like.function_type)
    _tf_private.set_function_attr(op, "body", definition.signature.name)


def _empty_handle_list(graph, op, position: int) -> None:
    """Input `position` of the forward `While` starts as an empty list of handles, not of
    elements: its `EmptyTensorList`'s element type and shape, changed in place (its inputs'
    and output's types do not depend on them). The shape keeps the element's rank, as the
    shape input's own shape is fixed (a rank-2 element's is a vector of 2): the handles are
    [1, 1]. (Not a new list op: a `While`'s inputs cannot be rerouted, its shape context in the
    graph has the body's inputs, not its own.)"""
    empty = op.inputs[position].op
    rank = empty.inputs[0].shape.num_elements()
    with graph.as_default(), tf.control_dependencies(None):
        ones = tf.constant([1] * rank, tf.int32, name=f"{empty.name}/{STREAM_SCOPE}_shape")
    _tf_private.set_device(ones.op, empty.device)
    _tf_private.update_input(empty, 0, ones)
    _tf_private.set_type_attr(empty, "element_dtype", HANDLE)
