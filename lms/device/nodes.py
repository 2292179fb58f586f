"""The NodeDefs the swap mechanisms describe their ops with (lms/device/copies.py,
lms/device/host_store.py), rather than creating the ops: the rewriter imports all swaps of a plan
in one `import_graph_def`, which is several times faster than creating thousands of ops one by
one through TensorFlow's Python op constructors (benchmarks/lms_speed.py)."""

import tensorflow as tf
from tensorflow.core.framework import attr_value_pb2, node_def_pb2


def node(name: str, op: str, inputs, device: str = "", **attrs) -> node_def_pb2.NodeDef:
    """A NodeDef; attrs are AttrValue protos."""
    node_def = node_def_pb2.NodeDef(name=name, op=op, device=device or "")
    node_def.input.extend(inputs)
    for key, value in attrs.items():
        node_def.attr[key].CopyFrom(value)
    return node_def


def type_attr(dtype) -> attr_value_pb2.AttrValue:
    return attr_value_pb2.AttrValue(type=tf.as_dtype(dtype).as_datatype_enum)


def type_list_attr(dtypes) -> attr_value_pb2.AttrValue:
    enums = [tf.as_dtype(d).as_datatype_enum for d in dtypes]
    return attr_value_pb2.AttrValue(list=attr_value_pb2.AttrValue.ListValue(type=enums))
