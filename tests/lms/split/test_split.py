"""lms/split as a whole, with the rewrite: a step with its largest element-wise ops,
convolutions, pooling ops or their gradients and fused batch norms split (and everything
swapped) makes the same updates as the plain step on the update check's ten models. The modules'
own tests: test_layouts, test_views, test_halo, test_norm, test_rewrite, test_fit (and the
mechanisms' pieces: tests/lms/device/test_host_pieces.py, test_copies.py).
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_equivalence import TEST_CASES, aggressive, assert_same_updates

import lms
from lms.device.host_store import HostStore
from lms.device.rewriter import rewrite
from lms.split.layouts import BATCH_OPS, ELEMENTWISE_OPS, splittable
from lms.split.norm import FUSED_NORMS
from lms.split.rewrite import running_ops, split_op

pytestmark = pytest.mark.compat


def _largest_splittable(graph, count: int, types) -> list:
    sizes, running = [], running_ops(graph)
    for op in graph.get_operations():
        if op.type in types and op in running and splittable(op) is None:
            tensors = (*op.inputs, *op.outputs)
            size = sum((t.shape.num_elements() or 0) * t.dtype.size for t in tensors)
            sizes.append((size, op.name))
    return [name for _, name in sorted(sizes, reverse=True)[:count]]


@pytest.mark.parametrize("make, tolerance", TEST_CASES.values(), ids=TEST_CASES)
def test_a_step_with_its_largest_element_wise_ops_split_makes_the_same_updates(
    make, tolerance, exact_arithmetic, request
):
    """The three largest element-wise ops, the three largest convolutions, pooling ops or
    their gradients (along the batch, or with a batch of 1 along the rows with halos) and the
    two largest fused batch norms (Keras 2's) in three pieces each, then every swappable tensor
    swapped (pieces included): the rewrite and the split together.

    Not MobileNetV2's batch norms: its early layers' updates there differ from the fused
    kernel's by up to 0.8 % when a batch norm's sums are ordered otherwise, and by as much with
    Keras 2's own unfused batch norm (test_split_norm.py compares the split with that)."""
    case = make()
    concrete = case.step.get_concrete_function(case.images, case.labels)
    store = HostStore()
    io = store.pieces()
    names = _largest_splittable(concrete.graph, 3, ELEMENTWISE_OPS)
    assert len(names) == 3
    names += _largest_splittable(concrete.graph, 3, BATCH_OPS)
    assert len(names) == 6
    if request.node.callspec.id != "mobilenetv2":
        names += _largest_splittable(concrete.graph, 2, FUSED_NORMS)
    for name in names:
        op = concrete.graph.get_operation_by_name(name)
        if splittable(op) is None:  # (a fused batch norm's gradient: split with its forward)
            split_op(op, 3, io)
    analysis = lms.internal.analyze(concrete.graph)
    plan = lms.internal.plan(analysis, aggressive().parameters)
    rewritten = rewrite(concrete, analysis, plan, store)
    assert_same_updates(case, rewritten, tolerance)
    assert store.held_bytes == 0
