"""The planning layer as a whole (lms/planning/: the order and the planner, on the graph
layer's reading): how near the swap-only floor plans reach on models shaped unlike the suite's
(issue 43):
everything swapped in the enforced order comes within 1.25x the floor (the largest op's own
bytes and the resident ones), through views swapped as their buffer, shape reads that hold
nothing, and the memory-aware order. Before issue 43: WaveNet 4.07x, an MLP-Mixer 2.84x.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import keras
import pytest
from lms_cases import sequence_mlp_case, wavenet_case

import lms
from lms.graph.step import ALIAS_OPS, VIEW_OPS
from lms.memory.lifetimes import largest_footprint
from lms.planning.ordering import order_positions
from lms.planning.planner import buffer_members

pytestmark = pytest.mark.compat
EVERYTHING = lms.Parameters(1, 1, 0, ordering=1)


KERAS_2 = int(keras.__version__.split(".")[0]) < 3


@pytest.fixture(scope="module", params=["wavenet", "sequence_mlp"])
def analysed(request):
    case = {"wavenet": wavenet_case, "sequence_mlp": sequence_mlp_case}[request.param]()
    concrete = case.step.get_concrete_function(case.images, case.labels)
    analysis = lms.internal.analyze(concrete.graph, paired_reads=lms.internal.cpu_paired_reads())
    return request.param, analysis, lms.internal.plan(analysis, EVERYTHING)


def test_everything_swapped_comes_within_a_quarter_of_the_floor(analysed):
    name, analysis, plan = analysed
    floor = largest_footprint(analysis).bytes + analysis.resident_bytes
    plain = lms.internal.simulate(analysis).peak_bytes
    peak = lms.internal.simulate(analysis, plan).peak_bytes
    assert plain > 2 * floor, name  # a step where reaching the floor matters
    # Keras 2 (TensorFlow 2.14) builds the MLP's layer norms as FusedBatchNormV3: 1.39x there
    # (5.5x while a batch norm gradient counted as a fusion tail of its forward op; docs/lms.md)
    bound = 1.5 if KERAS_2 and name == "sequence_mlp" else 1.25
    assert peak <= bound * floor, (name, peak / floor)


def test_the_views_the_gradient_reads_are_swapped_as_their_buffer(analysed):
    name, analysis, plan = analysed
    views = [
        s for s in plan.swaps if analysis.ops[analysis.tensors[s.tensor].producer].type in VIEW_OPS
    ]
    assert views, name
    for swap in views:
        tensor = analysis.tensors[swap.tensor]
        assert tensor.bytes == 0 and analysis.buffer_bytes(swap.tensor) > 0
    assert plan.swapped_bytes(analysis) == sum(analysis.buffer_bytes(s.tensor) for s in plan.swaps)


def test_no_swap_in_feeds_an_alias_or_comes_back_beside_its_original(analysed):
    """An alias reading a swap-in would have to keep the copy as long as its own readers; a
    swap-in triggered before the last read of the original (by a reader it does not reroute,
    of any view of the buffer) would only add its bytes beside it."""
    name, analysis, plan = analysed
    where = order_positions(analysis)
    members = buffer_members(analysis)
    rerouted = {(s.tensor, c) for s in plan.swaps for i in s.swap_ins for c in i.consumers}
    for swap in plan.swaps:
        root = analysis.tensors[swap.tensor].buffer
        near = max(
            (
                where[c]
                for m in members[root]
                for c, k in analysis.tensors[m].consumers
                if (m, (c, k)) not in rerouted
            ),
            default=where[analysis.tensors[root].producer],
        )
        for swap_in in swap.swap_ins:
            assert where[swap_in.trigger] >= near, (name, analysis.tensors[swap.tensor].name)
            for consumer, _ in swap_in.consumers:
                assert analysis.ops[consumer].type not in ALIAS_OPS


def test_shape_reads_of_a_defined_shape_keep_nothing(analysed):
    """Grappler folds Shape, ShapeN, Size and Rank of a fully defined tensor into constants:
    such an op reads no buffer (it stays in the order after its inputs)."""
    name, analysis, _ = analysed
    shape_ops = [i for i, op in enumerate(analysis.ops) if op.type in {"Shape", "ShapeN"}]
    assert shape_ops or name != "wavenet"  # Conv1D's gradient takes its input's shape
    for index in shape_ops:
        for t in analysis.ops[index].inputs:
            assert all(c != index for c, _ in analysis.tensors[t].consumers)


def test_aliases_run_as_soon_as_they_are_ready(analysed):
    """In the enforced order an alias follows its input's producer with nothing between but
    other aliases and constants, so its input's buffer has no late reader of its own."""
    name, analysis, plan = analysed
    where = order_positions(analysis)
    checked = 0
    for index, op in enumerate(analysis.ops):
        if op.type not in VIEW_OPS or not op.inputs:
            continue
        producers = [analysis.tensors[t].producer for t in op.inputs]
        latest = max(producers, key=lambda p: where[p])
        between = plan.order[where[latest] + 1 : where[index]]
        assert all(analysis.ops[i].type in ALIAS_OPS | {"Const"} for i in between), (
            name,
            op.name,
            [analysis.ops[i].type for i in between],
        )
        checked += 1
    assert checked, name
