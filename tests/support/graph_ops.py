"""The ops of a graph and of the While loops' bodies in it: a split op's alike pieces run as
one loop (lms/split/looped.py), whose body holds one piece's ops."""

from lms.graph.loops import WHILE_OPS, body_graph


def every_op(graph) -> list:
    """`graph`'s ops, then each While body's (recursively), in that order."""
    found = []
    for op in graph.get_operations():
        found.append(op)
        if op.type in WHILE_OPS:
            body = body_graph(graph, op, "body")
            found += every_op(body) if body is not None else []
    return found
