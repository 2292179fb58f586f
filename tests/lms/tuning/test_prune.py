"""lms/tuning/prune.py: a tuned plan keeps only the swaps its budget needs, and the curve it
prunes by predicts the simulation."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from lms_cases import sequence_mlp_case, wavenet_case

import lms
from lms.device.host_store import HOST_STORE_COST
from lms.tuning.prune import _candidates, prune, transfer_seconds


@pytest.fixture(scope="module", params=["wavenet", "mixer"])
def tuned_case(request):
    """A dilated Conv1D model and an MLP-Mixer-like one, tuned at half their plain peak without
    pruning: (analysis, tuned, budget)."""
    case = wavenet_case() if request.param == "wavenet" else sequence_mlp_case()
    graph = case.step.get_concrete_function(case.images, case.labels).graph
    analysis = lms.internal.analyze(graph)
    budget = lms.internal.simulate(analysis).peak_bytes // 2
    return analysis, lms.internal.tune(analysis, budget, lms.Parameters()), budget


def _without(analysis, plan, roots):
    kept = [s for s in plan.swaps if analysis.tensors[s.tensor].buffer not in roots]
    return dataclasses.replace(plan, swaps=kept)


def test_the_curve_a_dropped_swap_leaves_is_what_the_simulation_gives(tuned_case):
    analysis, tuned, _ = tuned_case
    order, changes = _candidates(analysis, tuned.plan, HOST_STORE_COST)
    assert len(order) >= 10
    exact = 0
    for root in order:
        lo, delta = changes[root]
        predicted = tuned.simulation.device.astype(np.int64).copy()
        predicted[lo : lo + len(delta)] += delta[: len(predicted) - lo]
        simulated = lms.internal.simulate(analysis, _without(analysis, tuned.plan, {root}))
        exact += np.array_equal(predicted, simulated.device)
        # what the curve leaves out (an element-wise op writing into a buffer) moves little
        assert abs(int(predicted.max()) - simulated.peak_bytes) <= 0.02 * simulated.peak_bytes
    assert exact >= 0.9 * len(order)


def test_a_tuned_plan_drops_the_swaps_its_budget_does_not_need(tuned_case):
    analysis, tuned, budget = tuned_case
    pruned = prune(analysis, tuned.plan, tuned.simulation, budget, HOST_STORE_COST)
    assert pruned.dropped >= 1
    assert pruned.simulation.peak_bytes <= budget
    assert pruned.simulation.peak_bytes == lms.internal.simulate(analysis, pruned.plan).peak_bytes
    kept = {s.tensor for s in pruned.plan.swaps}
    assert kept < {s.tensor for s in tuned.plan.swaps}
    assert transfer_seconds(analysis, pruned.plan, HOST_STORE_COST) < transfer_seconds(
        analysis, tuned.plan, HOST_STORE_COST
    )
    # what is left is needed: dropping any one buffer's swaps more goes over the budget, but
    # for the few the greedy order left behind a cheaper one it had taken
    needed = sum(
        lms.internal.simulate(analysis, _without(analysis, pruned.plan, {root})).peak_bytes > budget
        for root in {analysis.tensors[t].buffer for t in kept}
    )
    assert needed >= 0.8 * len({analysis.tensors[t].buffer for t in kept})


def test_tune_prunes_with_a_transfer_cost_and_keeps_given_parameters_as_given(tuned_case):
    analysis, tuned, budget = tuned_case
    costed = lms.internal.tune(analysis, budget, lms.Parameters(), cost=HOST_STORE_COST)
    assert costed.parameters == tuned.parameters  # the same search, then the swaps dropped
    assert costed.dropped == tuned.plan.swap_count - costed.plan.swap_count > 0
    assert costed.simulation.peak_bytes <= budget
    given = tuned.parameters.resolved()
    fixed = lms.Parameters(
        given.swapout_threshold, given.swapin_ahead, given.swapin_groupby, ordering=1
    )
    as_given = lms.internal.tune(analysis, budget, fixed, cost=HOST_STORE_COST)
    assert as_given.dropped == 0 and as_given.plan.swap_count == tuned.plan.swap_count


def test_the_plan_report_counts_the_swaps_dropped():
    case = wavenet_case()
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    plain = lms.internal.simulate(analysis).peak_bytes
    planner = lms.LMS(device_memory=plain // 2, safety_ratio=1.0)
    specs = [tf.TensorSpec.from_tensor(case.images), tf.TensorSpec.from_tensor(case.labels)]
    report = planner.plan_only(tf.function(case.step.python_function), *specs)
    assert report.dropped_swaps and report.dropped_swaps >= 1
    assert lms.PlanReport.from_dict(report.to_dict()).dropped_swaps == report.dropped_swaps
    # given parameters are applied as given: nothing dropped, and nothing written
    given = lms.LMS(device_memory=plain // 2, swapout_threshold=1, swapin_ahead=1, swapin_groupby=0)
    fixed = given.plan_only(tf.function(case.step.python_function), *specs)
    assert fixed.dropped_swaps is None and "dropped_swaps" not in fixed.to_dict()
