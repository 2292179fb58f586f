"""lms/planning/planner.py: swap-in triggers walk back exactly as far as asked.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_equivalence import mixed_block_case

import lms

pytestmark = pytest.mark.compat


def test_swap_in_triggers_walk_back_exactly_as_far_as_asked():
    """The jump table that makes planning fast finds the same trigger as walking back one op at
    a time, for every swapped tensor and distance."""
    from lms.planning.planner import _latest_input_op, find_trigger

    case = mixed_block_case()
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)

    def walk(consumer, tensor, ahead):
        producer_level = analysis.ops[analysis.tensors[tensor].producer].level
        node, trigger = consumer, None
        for step in range(ahead):
            previous = _latest_input_op(analysis, node, tensor if step == 0 else -1)
            if previous is None or analysis.ops[previous].level <= producer_level:
                break
            trigger = node = previous
        return trigger

    checked = 0
    for tensor, info in enumerate(analysis.tensors):
        if not info.swappable:
            continue
        for consumer, _ in info.consumers:
            for ahead in (1, 2, 3, 7, 50, 10_000):
                assert find_trigger(analysis, consumer, tensor, ahead) == walk(
                    consumer, tensor, ahead
                )
                checked += 1
    assert checked > 500
