"""Swaps of a loop's accumulated tensor lists (issue 43, item 3): a list is stacked into one dense
tensor for the mechanism's copies and rebuilt after them, so that every mechanism swaps lists as
it swaps any tensor.

Why between the loops and not inside them: a forward `While` outputs the lists its gradient's
`While` reads (lms/graph/loops.py); between the two they are ordinary tensors of the step, which
the planner can swap like any other, with no change to the loops' bodies. Stacked LSTMs then hold
the lists of the layer whose gradient runs, not of every layer (docs/lms.md, "Loops").

What it costs: `TensorListStack` and `TensorListFromTensor` copy the elements, so a list and its
dense copy are both on the device while it is stacked (at its swap-out) and while it is rebuilt
(at each swap-in); the simulator counts both (lms/memory/simulator.py `list_staging`). Elements
of a fully defined shape only, one per iteration (`lms.graph.loops.AccumulatedList`).
"""

from typing import NamedTuple

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from lms.device.nodes import node, type_attr

STACK, REBUILD = "lms_list_stack", "lms_list_rebuild"


class Dense(NamedTuple):
    """What a mechanism reads of the tensor it swaps (its dtype, device and static shape), for a
    list's stacked form."""

    dtype: tf.DType
    device: str
    shape: tf.TensorShape


class ListSwaps:
    """A mechanism's swaps (`lms.device.rewriter.SwapNodes`) for one tensor list of elements
    `element` (dtype, shape): the list is stacked before the mechanism's swap-out and rebuilt
    after its swap-in, both on the list's device."""

    def __init__(self, swaps, element: tuple):
        self.swaps = swaps
        self.keeps_ops = swaps.keeps_ops
        self.dtype, self.shape = tf.as_dtype(element[0]), tuple(element[1])

    def _dense(self, tensor) -> Dense:
        return Dense(self.dtype, tensor.device, tf.TensorShape([None, *self.shape]))

    def _element_shape(self, prefix: str, device: str):
        value = tf.make_tensor_proto(list(self.shape), tf.int32)
        return node(
            f"{prefix}lms_list_element_shape",
            "Const",
            [],
            device,
            dtype=type_attr(tf.int32),
            value=attr_value_pb2.AttrValue(tensor=value),
        )

    def swap_out_nodes(self, prefix, source, tensor, readers):
        shape = self._element_shape(prefix, tensor.device)
        stack = node(
            f"{prefix}{STACK}",
            "TensorListStack",
            [source, shape.name],
            tensor.device,
            element_dtype=type_attr(self.dtype),
            num_elements=attr_value_pb2.AttrValue(i=-1),
        )
        dense = self._dense(tensor)
        return [shape, stack, *self.swaps.swap_out_nodes(prefix, stack.name, dense, readers)]

    def swap_in_nodes(self, prefix, stored, tensor):
        copied = self.swaps.swap_in_nodes(prefix, stored, self._dense(tensor))
        shape = self._element_shape(prefix, tensor.device)
        rebuild = node(
            f"{prefix}{REBUILD}",
            "TensorListFromTensor",
            [copied[-1].name, shape.name],
            tensor.device,
            element_dtype=type_attr(self.dtype),
            shape_type=type_attr(tf.int32),
        )
        return [*copied, shape, rebuild]
