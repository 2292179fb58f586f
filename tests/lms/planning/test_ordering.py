"""lms/planning/ordering.py: the enforced order runs the smaller of two gradients of one
convolution first.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_equivalence import unet_case

import lms

pytestmark = pytest.mark.compat


def test_the_enforced_order_runs_the_smaller_of_two_gradients_of_one_convolution_first():
    """Of two ops made ready together, the one with smaller outputs goes first, so that the larger
    output is not held while the other runs: at 176³ the 3D U-Net's peak was a filter gradient
    running beside its convolution's 3.9 GiB input gradient."""
    from lms.planning.ordering import depth_first_order, positions

    case = unet_case(resolution=48)
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    where = positions(depth_first_order(analysis))
    assert sorted(where) == list(range(len(analysis.ops)))
    for index, op in enumerate(analysis.ops):  # a topological order
        for t in op.inputs:
            assert where[analysis.tensors[t].producer] < where[index]
        assert all(where[c] < where[index] for c in op.control_inputs)

    def produced(index):
        return sum(analysis.tensors[t].bytes for t in analysis.ops[index].outputs)

    filter_first = 0
    for index, op in enumerate(analysis.ops):
        if op.type != "Conv3DBackpropFilterV2":
            continue
        for other, _ in analysis.tensors[op.inputs[2]].consumers:
            if analysis.ops[other].type == "Conv3DBackpropInputV2":
                smaller, larger = sorted((index, other), key=lambda i: (produced(i), i))
                assert where[smaller] < where[larger]
                filter_first += smaller == index
    assert filter_first >= 4  # the high-resolution layers, whose activations outweigh weights
