"""What a `While` loop holds for its gradient, which the step's graph shows as empty handles.

TensorFlow 2 differentiates a loop (while_v2) by pushing, on every iteration, each value the
gradient needs onto a tensor list: an output of the forward `While` (a variant, sized 0 by its
shape) that the gradient's `While` pops. For two stacked Keras LSTMs of width 256 over 128
tokens, batch 8, those lists hold 2 x 128 x (11 x 8 KiB + 2 x 1 MiB) = 535 MiB, the step's
peak: a plan that counts them as nothing "fits" and measures its plain peak. Here each list is
sized as trips x the pushed tensor's bytes, and a list of one push per iteration of a fully
defined element shape is swappable between the loops as one dense tensor (lms/device/lists.py):
LMS still plans nothing inside a loop's body, and `lms.api` warns, naming the loop.
"""

from dataclasses import dataclass

import tensorflow as tf

from lms.graph.names import STREAM_SCOPE

WHILE_OPS = frozenset({"While", "StatelessWhile"})
IF_OPS = frozenset({"If", "StatelessIf"})
# Body ops that put one element per iteration into the list they read (input 0).
LIST_WRITES = frozenset({"TensorListPushBack", "TensorListSetItem"})
# Ops that pass a list handle on unchanged within a body.
PASS_THROUGH = frozenset({"Identity", "IdentityN"})


def called_function(graph, op, attribute: str = "f"):
    """The function an op's function attribute names ("f" of a call, "body" of a While,
    "then_branch" of an If), or None where unknown."""
    name = called_name(op, attribute)
    try:
        return graph._get_function(name) if name is not None else None
    except (AttributeError, ValueError, KeyError, TypeError):
        return None


def called_name(op, attribute: str = "f") -> str | None:
    """The name of the function an op's function attribute names, or None."""
    try:
        return op.get_attr(attribute).name
    except (AttributeError, ValueError, TypeError):
        return None


def body_graph(graph, op, attribute: str):
    """The FuncGraph of function attribute `attribute`, or None."""
    return getattr(called_function(graph, op, attribute), "graph", None)


def _static_int(tensor) -> int | None:
    value = tf.get_static_value(tensor)
    if value is not None and getattr(value, "size", 1) == 1:
        return int(value)
    if tensor.op.type in ("Max", "Maximum", "Identity") and tensor.op.inputs:
        return _static_int(tensor.op.inputs[0])  # Keras: Max(Const(T), reduced over no axis)
    return None


def trip_count(op) -> int | None:
    """How many iterations a while_v2 loop runs, when the graph says: its maximum_iterations
    (input 1), else the length of a list it reads from a tensor (the sequence it loops over)."""
    trips = _static_int(op.inputs[1]) if len(op.inputs) > 1 else None
    if trips is not None and trips >= 0:
        return trips
    lengths = [
        t.op.inputs[0].shape[0]
        for t in op.inputs
        if t.op.type == "TensorListFromTensor" and t.op.inputs[0].shape.rank
    ]
    lengths = [n for n in lengths if n is not None]
    return max(lengths) if lengths else None


@dataclass(frozen=True)
class AccumulatedList:
    """A tensor list a forward loop fills for its gradient: its bytes (trips x element), and
    its element's dtype and shape when one push per iteration of a fully defined shape of rank
    >= 1 fills it (then it can be stacked into one dense tensor and rebuilt: swappable), else
    None."""

    bytes: int
    element: tuple | None = None  # (tf.DType, shape as a tuple of ints)


def accumulated_lists(graph, op, size_of) -> dict[int, AccumulatedList]:
    """Per output of a `While` (by position): the tensor list its body writes one element into
    per iteration; `size_of(tensor)` gives an element's bytes (None: unknown). Lists of unknown
    element shape or trip count are left out."""
    body = body_graph(graph, op, "body")
    trips = trip_count(op)
    if body is None or not trips:
        return {}
    position_of = {placeholder.ref(): k for k, placeholder in enumerate(body.inputs)}
    writes = [inner for inner in body.get_operations() if inner.type in LIST_WRITES]
    pushed = {passed_source(inner.inputs[-1]).ref() for inner in writes}
    sizes: dict[int, int] = {}
    elements: dict[int, list] = {}
    for inner in writes:
        k = position_of.get(passed_source(inner.inputs[0]).ref())
        element = size_of(inner.inputs[-1])
        if k is None or element is None or k >= len(op.outputs):
            continue
        value = passed_source(inner.inputs[-1])
        if value.op.type in SHARED_SOURCES:
            continue  # a reference to a variable or constant: no copy
        j = position_of.get(value.ref())
        if j is not None and j < len(body.outputs):
            carried = passed_source(body.outputs[j])
            if carried.ref() == value.ref() or carried.ref() in pushed:
                continue  # loop-invariant, or the previous iteration's value, pushed already
        sizes[k] = sizes.get(k, 0) + trips * element
        elements.setdefault(k, []).append(inner)
    return {k: AccumulatedList(size, _element(elements[k])) for k, size in sizes.items()}


def _element(writes) -> tuple | None:
    """The (dtype, shape) of a list's elements if it can be stacked: one PushBack per
    iteration (a SetItem's index may skip or repeat), of a fully defined shape of rank >= 1
    (scalars are never swapped, as dense tensors of rank < 2 are not)."""
    if len(writes) != 1 or writes[0].type != "TensorListPushBack":
        return None
    value = writes[0].inputs[-1]
    if f"/{STREAM_SCOPE}/" in value.op.name:
        return None  # the host store's handles of a streamed list (lms/device/list_streams.py)
    if not value.shape.is_fully_defined() or value.shape.rank < 1:
        return None
    return value.dtype, tuple(value.shape.as_list())


# Tensors whose buffer outlives the loop anyway: a list element reading them shares it.
SHARED_SOURCES = frozenset({"ReadVariableOp", "Const", "VarHandleOp"})


def passed_source(tensor):
    """The tensor `tensor` passes on unchanged (through Identity ops), whose buffer it shares."""
    while tensor.op.type in PASS_THROUGH and tensor.op.inputs:
        index = tensor.value_index if tensor.op.type == "IdentityN" else 0
        tensor = tensor.op.inputs[index]
    return tensor


def passed_lists(graph, op) -> list[int]:
    """The outputs of a `While` that are its input list of the same position, passed through
    its body unchanged (a layer's input sequence, which the body reads by index): the same list
    as the input, held as long as the output is read (by the gradient's zeros of it)."""
    body = body_graph(graph, op, "body")
    if body is None or len(body.outputs) != len(body.inputs):
        return []
    return [
        k
        for k, (placeholder, output) in enumerate(zip(body.inputs, body.outputs, strict=True))
        if placeholder.dtype == tf.variant
        and k < len(op.outputs)
        and passed_source(output).ref() == placeholder.ref()
    ]
