"""lms/device/rewriter.py: a rewritten step makes the same updates as the plain one (the update
check on ten models, and that it catches a wrong swap-in), and its swap ops and control edges sit
where the plan and the enforced order put them.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_cases import Case, small_cnn, workload_case
from lms_equivalence import (
    TEST_CASES,
    aggressive,
    assert_same_updates,
    force_plan,
    mixed_block_case,
)

import lms
from lms.planning.planner import Plan, Swap

pytestmark = pytest.mark.compat


@pytest.mark.parametrize("make, tolerance", TEST_CASES.values(), ids=TEST_CASES)
def test_rewritten_step_makes_the_same_updates(make, tolerance, exact_arithmetic):
    """Every variable's update of a training step, with every swappable tensor swapped."""
    case = make()
    rewritten, analysis, plan, _ = force_plan(aggressive(), case)
    assert plan.swap_count > 5
    assert_same_updates(case, rewritten, tolerance)


def swap_in_of_another_tensor(analysis, plan, graph):
    """The plan with one swap-in wired to the wrong tensor: the first swap's far readers get
    another swapped tensor of the same shape and dtype, produced before them."""

    def signature(swap):
        tensor = graph.get_tensor_by_name(analysis.tensors[swap.tensor].name)
        return tensor.shape.as_list(), tensor.dtype

    for first in plan.swaps:
        reader_level = min(analysis.ops[c].level for s in first.swap_ins for c, _ in s.consumers)
        for other in plan.swaps:
            if (
                other is not first
                and signature(other) == signature(first)
                and analysis.ops[analysis.tensors[other.tensor].producer].level < reader_level
            ):
                wrong = Swap(other.tensor, first.swap_ins, first.near_consumers)
                swaps = [wrong if s is first else s for s in plan.swaps]
                return Plan(plan.parameters, swaps, plan.serialized_levels)
    raise AssertionError("no two swapped tensors of the same shape")


def test_the_update_check_catches_one_swap_in_of_the_wrong_tensor(exact_arithmetic):
    """A test of the test above: one miswired swap-in must fail it."""
    case = Case(*small_cnn())
    rewritten, *_ = force_plan(aggressive(), case, mutate=swap_in_of_another_tensor)
    with pytest.raises(AssertionError, match="updates of .* differ"):
        assert_same_updates(case, rewritten)


def test_custom_gradient_attention_model_trains_the_same_and_leaves_the_host_store_empty(
    exact_arithmetic,
):
    case = mixed_block_case()
    rewritten, analysis, plan, _ = force_plan(aggressive(), case)
    assert plan.swap_count > 10
    reads = [(c, k) for s in plan.swaps for i in s.swap_ins for c, k in i.consumers]
    identity_reads = [(c, k) for c, k in reads if analysis.ops[c].type == "IdentityN"]
    for op, position in identity_reads:  # never at a position whose output is unread
        assert analysis.tensors[analysis.ops[op].outputs[position]].consumers
    # the optimizer's IdentityN of all gradients is bypassed: its readers read the gradients
    bypassed = {analysis.tensors[source].name for _, _, source in analysis.bypassed}
    assert len(bypassed) >= len(case.model.trainable_variables)
    assert all(analysis.ops[c].inputs[k] == source for c, k, source in analysis.bypassed)
    assert_same_updates(case, rewritten)
    for _ in range(3):
        rewritten(case.images, case.labels)
        assert rewritten.lms_store.held_bytes == 0  # no swap-in was planned for a pruned read


def test_swap_ops_sit_where_the_plan_put_them():
    case = Case(*small_cnn())
    rewritten, analysis, plan, concrete = force_plan(aggressive(), case)
    store = rewritten.lms_store
    float(rewritten(case.images, case.labels))
    assert store.held_bytes == 0  # every swapped tensor freed after its last swap-in
    ops = {op.name: op for op in concrete.graph.get_operations()}
    swap_outs = [op for op in ops.values() if "lms_swapout" in op.name]
    swap_ins = [op for op in ops.values() if op.type == "PyFunc" and "lms_swapin" in op.name]
    assert len(swap_outs) == plan.swap_count and len(swap_ins) == plan.swap_in_count
    for swap in plan.swaps:
        tensor = analysis.tensors[swap.tensor]
        for swap_in in swap.swap_ins:
            trigger = analysis.ops[swap_in.trigger].name
            for consumer, position in swap_in.consumers:
                reader = ops[analysis.ops[consumer].name].inputs[position].op
                assert reader.type == "EnsureShape"  # the swap-in's static shape, for Grappler
                copy = reader.inputs[0].op  # into the allocator, as a GPU's swap-in would be
                assert copy.type == "DeepCopy" and "lms_swapin" in copy.name
                reader = copy.inputs[0].op
                assert "lms_swapin" in reader.name and reader.type == "PyFunc", reader.name
                assert trigger in [c.name for c in reader.control_inputs]
                # the swap-in reads the handle its tensor's swap-out produced
                source = reader.inputs[0].op
                assert "lms_swapout" in source.name and source.inputs[0].name == tensor.name


def test_an_ordered_plan_trains_the_same_and_chains_the_ops_that_run(exact_arithmetic):
    from lms.planning.ordering import UNCHAINED_OPS, executed_ops

    for case in (mixed_block_case(), workload_case("googlenet", 64, 2)):
        planner = lms.LMS(
            device_memory="1TiB", ordering=1, swapout_threshold=1, swapin_ahead=1, swapin_groupby=0
        )
        rewritten, analysis, plan, concrete = force_plan(planner, case)
        assert plan.order is not None and plan.swap_count > 10
        ops = concrete.graph.get_operations()
        # Identities stay out of the chain (Grappler removes them), and so do constants (it
        # moves them); the order runs an alias as soon as it is ready, not necessarily just
        # before its reader
        chain = [
            ops[i]
            for i in plan.order
            if executed_ops(analysis)[i]
            and analysis.ops[i].type not in UNCHAINED_OPS
            and not analysis.ops[i].constant
        ]
        for before, after in zip(chain, chain[1:], strict=False):
            # a sum of 3+ inputs runs as a chain of adds in its place
            first = in_place_of(after)[0]
            waits = {t.op for t in first.inputs} | set(first.control_inputs)
            if len(in_place_of(after)) > 1:  # the adds after the first wait for it
                waits |= {t.op for op in in_place_of(after) for t in op.inputs}
            assert in_place_of(before)[-1] in waits, (before.name, after.name)
        assert_same_updates(case, rewritten)
    # the sums Grappler's memory optimizer would turn into a temporary variable: none is left
    # to run (no reader, nothing waits for it), each is a chain of two-input adds
    sums = [op for op in ops if op.type == "AddN" and len(op.inputs) > 2]
    assert sums, "GoogLeNet's branches meet in sums of 3 and 4 gradients"
    for op in sums:
        assert not op.outputs[0].consumers() and not op._control_outputs, op.name
        adds = [o for o in ops if o.name.startswith(f"{op.name}/lms_sum/")]
        assert [o.type for o in adds] == ["AddV2"] * (len(op.inputs) - 1), op.name


def _reads_through_folded(op, node) -> bool:
    """Whether TensorFlow op `op` reads `node`'s output, directly or through ops Grappler removes
    (lms.planning.ordering.FOLDED_OPS, Identity)."""
    from lms.planning.ordering import FOLDED_OPS, UNCHAINED_OPS

    stack, seen = [t.op for t in op.inputs], set()
    while stack:
        source = stack.pop()
        if source is node:
            return True
        if source.name not in seen and source.type in FOLDED_OPS | UNCHAINED_OPS:
            seen.add(source.name)
            stack.extend(t.op for t in source.inputs)
    return False


def in_place_of(op) -> list:
    """The ops that run in `op`'s place: the two-input adds a sum of 3+ inputs was split into
    (lms.device.rewriter._split_sums; the first waits for what the sum waited for, what waited for
    the
    sum waits for the last), else `op` itself."""
    adds = [o for o in op.graph.get_operations() if o.name.startswith(f"{op.name}/lms_sum/")]
    return adds or [op]


def test_swaps_are_links_of_the_enforced_order():
    """In an enforced order a swap-in waits for its trigger and only its readers wait for it (its
    copy runs beside the ops between the two, within the interval simulated for it); the anchor
    after a swapped tensor's producer waits for its swap-out; and every anchor waits for the
    anchor before it, not only through ops Grappler folds away. Before: ResNet50 1024² b1 ran 94
    pairs of chained ops side by side (projection shortcuts, batch norm gradients' Tiles and
    Sums), a swap-out still copying at the measured peak, 1.18x the simulated peak. A swap-in
    also waits for the swap-outs the anchor after its trigger waits for (ResNet50 768² b1: a
    copy allocated before a swapped-out buffer went, 1.06x the simulated peak)."""
    from lms.planning.ordering import anchor_ops, next_anchors, order_positions
    from lms.planning.planner import swap_out_waiter

    case = workload_case("googlenet", 64, 2)
    planner = lms.LMS(
        device_memory="1TiB", ordering=1, swapout_threshold=1, swapin_ahead=3, swapin_groupby=0
    )
    rewritten, analysis, plan, concrete = force_plan(planner, case)
    ops = concrete.graph.get_operations()
    known = set(ops)
    where = order_positions(analysis)
    swap_outs, ordered_copies = {}, 0
    for swap in plan.swaps:
        produced = concrete.graph.get_tensor_by_name(analysis.tensors[swap.tensor].name)
        readers = in_place_of(produced.op)[-1].outputs[produced.value_index].consumers()
        swap_outs[swap.tensor] = next(c for c in readers if "lms_swapout" in c.name)
    for swap in plan.swaps:
        tensor = analysis.tensors[swap.tensor]
        produced = concrete.graph.get_tensor_by_name(tensor.name)
        readers = in_place_of(produced.op)[-1].outputs[produced.value_index].consumers()
        swap_out = swap_outs[swap.tensor]
        waiter = swap_out_waiter(analysis, plan, swap)
        if waiter >= 0:
            assert swap_out in ops[waiter].control_inputs, (tensor.name, analysis.ops[waiter].name)
        for swap_in in swap.swap_ins:
            consumer, position = swap_in.consumers[0]
            last = ops[consumer].inputs[position].op
            first = last
            while first.inputs and first.type != "PyFunc":
                first = first.inputs[0].op
            assert in_place_of(ops[swap_in.trigger])[-1] in first.control_inputs
            # no op of the step waits for the copy but through its data
            waiting = [op for op in last._control_outputs if op in known]
            assert not waiting, (tensor.name, [op.name for op in waiting])
            # it waits for the swap-outs the anchor after its trigger waits for (of tensors
            # made by then): the simulation frees those before it allocates the copy
            trigger_anchor = int(next_anchors(analysis)[swap_in.trigger])
            for other in plan.swaps:
                made = analysis.tensors[other.tensor].producer
                if (
                    swap_out_waiter(analysis, plan, other) == trigger_anchor >= 0
                    and where[made] <= where[swap_in.trigger]
                ):
                    assert swap_outs[other.tensor] in first.control_inputs, tensor.name
                    ordered_copies += 1
    assert ordered_copies > 0
    anchors = [ops[i] for i in plan.order if anchor_ops(analysis)[i]]
    for before, after in zip(anchors, anchors[1:], strict=False):
        done = in_place_of(before)[-1]
        assert any(
            done in op.control_inputs or _reads_through_folded(op, done)
            for op in in_place_of(after)
        ), (before.name, after.name)
    assert_same_updates(case, rewritten)


def test_grappler_finds_no_cycle_in_an_ordered_step():
    """Grappler's two rounds over an ordered, swapped step (as TensorFlow runs it, on the CPU)
    raise nothing. Constant folding pushes a Const down into the op of an expression that reads
    it; chained, the Const brought its chain edge along: ResNet50's batch norm gradients then
    made cycles ("The graph couldn't be sorted in topological order"), the arithmetic and
    dependency optimizers gave up, and the step measured 1.18x its simulated peak (Eigen)."""
    import tensorflow as tf

    from lms import _tf_private

    case = workload_case("resnet50", 64, 1)
    planner = lms.LMS(
        device_memory="1TiB", ordering=1, swapout_threshold=28, swapin_ahead=1, swapin_groupby=3
    )
    rewritten, analysis, plan, concrete = force_plan(planner, case)
    assert plan.swap_count > 50
    # no constant waits for an op the rewrite chose
    ops = concrete.graph.get_operations()
    constants = [i for i, op in enumerate(analysis.ops) if op.constant]
    assert len(constants) > 100
    for i in constants:
        added = {op.name for op in ops[i].control_inputs}
        assert added == {analysis.ops[c].name for c in analysis.ops[i].control_inputs}, ops[i].name
    graph = rewritten.graph
    graph_def = graph.as_graph_def()
    for node in graph_def.node:
        node.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    fetches = [t.op.name for t in graph.outputs] + [op.name for op in graph.control_outputs]
    config = _tf_private.lms_step_config(_tf_private.default_call_config())
    try:
        _tf_private.grappler_optimize(graph_def, fetches, 2**30, "8.0", config)
    except tf.errors.InvalidArgumentError as error:  # what a cycle raises
        pytest.fail(f"Grappler: {error.message}")
