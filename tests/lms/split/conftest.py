"""Fixtures of the split tests."""

import pytest

from lms.split.layouts import splittable
from lms.split.rewrite import running_ops, split_op


def _split_every(graph, io, wanted, pieces: int = 3) -> list[str]:
    """Split, in three (or `pieces`), every op of `graph` that runs, can be split and
    `wanted(op)` accepts: the types split, in graph order."""
    running, split = running_ops(graph), []
    for op in list(graph.get_operations()):
        if wanted(op) and op in running and splittable(op) is None:
            split.append(split_op(op, pieces, io).op_type)
    return split


@pytest.fixture
def split_every():
    """`_split_every`: split every op that runs, can be split and is wanted, with one `io`."""
    return _split_every
