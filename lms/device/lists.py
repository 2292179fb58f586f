"""Swaps of a loop's accumulated tensor lists (issue 43, item 3) on the emulated device: a list is
stacked into one dense tensor for the host store's py_funcs, which take no list, and rebuilt from
the host array after the swap-in.

Why between the loops and not inside them: a forward `While` outputs the lists its gradient's
`While` reads (lms/graph/loops.py); between the two they are ordinary tensors of the step, which
the planner can swap like any other, with no change to the loops' bodies. Stacked LSTMs then hold
the lists of the layer whose gradient runs, not of every layer (docs/lms.md, "Loops").

TensorFlow's own copies (a GPU, the two-device mode: lms/device/copies.py) need none of this:
a list that crosses devices is copied element by element (the variant's registered device copy),
so the rewriter gives them the list as it is (`SwapNodes.copies_lists`).

What stacking costs: `TensorListStack` copies the elements, so at the swap-out a list and its
dense copy are both on the device; the simulator counts that copy
(lms/memory/simulator.py `list_staging`). The rebuild (`TensorListFromTensor`) copies the
elements out of the swap-in's host array, which is not device memory: nothing extra there.
Elements of a fully defined shape only, one per iteration (`lms.graph.loops.AccumulatedList`).
"""

from typing import NamedTuple

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2

from lms.device.nodes import node, type_attr

STACK, REBUILD = "lms_list_stack", "lms_list_rebuild"


class Dense(NamedTuple):
    """What the host store reads of the tensor it swaps (its dtype, device and static shape),
    for a list's stacked form."""

    dtype: tf.DType
    device: str
    shape: tf.TensorShape


class ListSwaps:
    """The host store's swaps (`lms.device.rewriter.SwapNodes`) for one tensor list of elements
    `element` (dtype, shape): the list is stacked before the store's swap-out and rebuilt from
    the host array its swap-in reads (`host_read_nodes`), both on the list's device."""

    copies_lists = True  # (what it makes of a list is what the rewriter asks for)

    def __init__(self, store, element: tuple):
        self.store = store
        self.keeps_ops = store.keeps_ops
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
        return [shape, stack, *self.store.swap_out_nodes(prefix, stack.name, dense, readers)]

    def swap_in_nodes(self, prefix, stored, tensor):
        read = self.store.host_read_nodes(prefix, stored, self._dense(tensor))
        shape = self._element_shape(prefix, tensor.device)
        rebuild = node(
            f"{prefix}{REBUILD}",
            "TensorListFromTensor",
            [read[-1].name, shape.name],
            tensor.device,
            element_dtype=type_attr(self.dtype),
            shape_type=type_attr(tf.int32),
        )
        return [*read, shape, rebuild]
