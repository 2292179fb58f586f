"""lms/device/list_streams.py: a loop's tensor lists streamed through the host store element by
element, inside the loops' bodies (issue 43, item 3): the updates as without LMS, what the
analysis and the host store see, when the pipeline streams, and the reach measured in fresh
processes.

Not marked compat: with Keras 2 (TensorFlow 2.14) a recurrent layer runs inside a function call
(its backend selection), so its loops are not ops of the step."""

import keras
import numpy as np
import pytest
from _lstm_step import lstm_step
from lms_cases import run_child

import lms
from lms.calibration import Calibration
from lms.device.copies import DeviceCopy
from lms.device.host_store import HostStore
from lms.device.list_streams import MIN_ELEMENT_BYTES, stream_lists, streamable_lists
from lms.device.rewriter import rewrite
from lms.graph.names import STREAM_SCOPE
from lms.graph.step import tensor_bytes
from lms.loop_lists import stream_loop_lists, streaming_order
from lms.memory.simulator import simulate
from lms.pipeline import Request
from lms.planning.planner import Plan

MiB = 2**20
LENGTH, WIDTH = 16, 128  # a GRU's elements at batch 8: 8 x 128 floats, 4 KiB


def _gru_step(batch: int, length: int = LENGTH, width: int = WIDTH):
    keras.backend.clear_session()
    keras.utils.set_random_seed(0)
    return lstm_step(length, batch, width, 2, "gru")


def _size(tensor):
    return tensor_bytes(tensor, None)


def _streamed(step, x, y, store):
    """The step with every list streamed through `store`, no swap: the rewritten callable."""
    concrete = step.get_concrete_function(x, y)
    lists = streamable_lists(concrete.graph, _size)
    stream_lists(concrete.graph, store, lists)
    analysis = lms.internal.analyze(concrete.graph)
    return rewrite(concrete, analysis, Plan(lms.Parameters(), [], frozenset()), store), lists


def _updates(step, callable_, x, y) -> dict:
    for _ in range(2):
        float(callable_(x, y))
    graph = step.get_concrete_function(x, y).graph
    return {v.name: v.numpy() for v in graph.variables}


def test_streamed_lists_give_the_plain_steps_updates():
    """Two steps of two stacked GRUs: weights and optimizer slots as without LMS."""
    step, x, y = _gru_step(8)
    plain = _updates(step, step, x, y)
    step, x, y = _gru_step(8)
    callable_, lists = _streamed(step, x, y, HostStore())
    streamed = _updates(step, callable_, x, y)
    assert lists and plain.keys() == streamed.keys()
    for name, value in plain.items():
        np.testing.assert_allclose(streamed[name], value, rtol=1e-6, atol=1e-7, err_msg=name)


def test_a_streamed_list_holds_handles_and_the_host_store_moves_each_element():
    step, x, y = _gru_step(8)
    concrete = step.get_concrete_function(x, y)
    before = dict(lms.internal.analyze(concrete.graph).loops)
    store = HostStore()
    callable_, lists = _streamed(step, x, y, store)
    # every list pushed per iteration with an element of 4 KiB or more, one pair of loops each
    assert {s.shape for s in lists} >= {(8, WIDTH)}
    assert all(s.bytes == LENGTH * 8 * WIDTH * 4 for s in lists if s.shape == (8, WIDTH))
    after = dict(lms.internal.analyze(callable_.graph).loops)
    for forward in {s.forward for s in lists}:
        streamed = sum(s.bytes for s in lists if s.forward == forward)
        assert after.get(forward, 0) <= before[forward] - streamed + 4096  # handles: bytes each
    float(callable_(x, y))
    traffic = store.take_traffic()
    assert traffic.swap_outs == traffic.swap_ins == LENGTH * len(lists)
    assert traffic.out_bytes == sum(s.bytes for s in lists)
    assert store.held_bytes == 0  # each element freed by its one read


def test_the_host_store_holds_a_streamed_list_between_its_loops_in_the_simulation():
    step, x, y = _gru_step(8)
    concrete = step.get_concrete_function(x, y)
    lists = streamable_lists(concrete.graph, _size)
    stream_lists(concrete.graph, HostStore(), lists)
    analysis = lms.internal.analyze(concrete.graph)
    one_layer = max(
        sum(s.bytes for s in lists if s.forward == f) for f in {s.forward for s in lists}
    )
    assert simulate(analysis, Plan(lms.Parameters(), [], frozenset())).host_peak_bytes >= one_layer


def test_small_elements_and_lists_already_streamed_are_not_streamed():
    step, x, y = _gru_step(2, width=64)  # 2 x 64 floats: 512 bytes
    assert MIN_ELEMENT_BYTES > 2 * 64 * 4
    assert not streamable_lists(step.get_concrete_function(x, y).graph, _size)
    step, x, y = _gru_step(8)
    concrete = step.get_concrete_function(x, y)
    stream_lists(concrete.graph, HostStore(), streamable_lists(concrete.graph, _size))
    assert not streamable_lists(concrete.graph, _size)  # its handles are 8 bytes


def _budget_for_twice_the_batch() -> int:
    """The plain step's simulated peak at batch 8: at batch 16, two GRUs' lists swapped whole
    do not fit in it (one layer's are the floor), streamed they do."""
    step, x, y = _gru_step(8)
    return simulate(lms.internal.analyze(step.get_concrete_function(x, y).graph)).peak_bytes


def test_the_pipeline_streams_only_when_no_plan_fits_otherwise():
    budget = _budget_for_twice_the_batch()
    step, x, y = _gru_step(16)
    planner = lms.LMS(device_memory=int(budget / 0.9), calibration_steps=0)
    prepared = planner.pipeline.prepare(step, (x, y))
    assert prepared.report.fits and (prepared.report.streamed_lists or 0) >= 7  # a loop's
    assert prepared.report.to_dict()["streamed_lists"] == prepared.report.streamed_lists
    assert float(prepared.callable(x, y)) > 0
    # with room for the lists swapped whole: nothing streamed, nothing written in the report
    step, x, y = _gru_step(16)
    roomy = lms.LMS(device_memory="1GiB", calibration_steps=0).pipeline.prepare(step, (x, y))
    assert roomy.report.streamed_lists is None and "streamed_lists" not in roomy.report.to_dict()


def test_tensorflows_copies_never_stream():
    """On a GPU (the two-device mode) a list crosses devices element by element already, and
    Keras runs recurrent layers as cuDNN kernels: streaming is the host store's alone."""
    step, x, y = _gru_step(16)
    concrete = step.get_concrete_function(x, y)
    assert streamable_lists(concrete.graph, _size)
    pipeline = lms.LMS(device_memory="1GiB").pipeline
    pipeline.mechanism = DeviceCopy("/device:CPU:0", "/device:CPU:0")
    ops = len(concrete.graph.get_operations())
    assert not stream_loop_lists(pipeline.mechanism.swaps, concrete)
    assert len(concrete.graph.get_operations()) == ops


def test_a_plan_from_the_calibration_cache_streams_again(tmp_path):
    """The cache keeps how many lists a plan that held streamed: parameters applied as given
    never go through the search that streams."""
    budget = _budget_for_twice_the_batch()
    path = tmp_path / "cache.json"
    step, x, y = _gru_step(16)
    planner = lms.LMS(device_memory=int(budget / 0.9), calibration_steps=0, calibration_cache=path)
    planned = planner.pipeline.prepare(step, (x, y)).planned
    held = Calibration(limit_bytes=budget, device_limit_bytes=budget, steps=1)
    held.begin(budget, planned.tuned.simulation.peak_bytes)
    held.observe(planned.tuned.simulation.peak_bytes)
    parameters = planned.tuned.parameters.as_dict()
    streamed = planner.pipeline.report(planned).streamed_lists
    assert streamed
    planner.pipeline.cache.store(planned.fingerprint, held, parameters, None, streamed)
    step, x, y = _gru_step(16)
    again = lms.LMS(device_memory=int(budget / 0.9), calibration_steps=0, calibration_cache=path)
    report = again.pipeline.prepare(step, (x, y)).report
    assert report.streamed_lists == streamed


def test_lists_are_streamed_a_loop_at_a_time_largest_first_as_many_as_needed():
    """A loop's lists together (an RNN's carried state frees nothing streamed alone), only as
    many loops as cover the bytes needed, and a calibration cache's count names the same."""
    step, x, y = _gru_step(16)
    concrete = step.get_concrete_function(x, y)
    groups = streaming_order(streamable_lists(concrete.graph, _size))
    assert len(groups) == 2 and all(len({s.forward for s in g}) == 1 for g in groups)
    first = stream_loop_lists(HostStore(), concrete, needed_bytes=1)
    assert [s.forward for s in first] == [s.forward for s in groups[0]]
    rest = stream_loop_lists(HostStore(), concrete)  # the other loop's, all that is left
    assert {s.forward for s in rest} == {groups[1][0].forward}
    assert not stream_loop_lists(HostStore(), concrete)
    step, x, y = _gru_step(16)
    replayed = stream_loop_lists(HostStore(), step.get_concrete_function(x, y), count=len(first))
    assert [(s.forward, s.position) for s in replayed] == [(s.forward, s.position) for s in first]
    float(lms.LMS(device_memory="1GiB", calibration_steps=0).wrap(step)(x, y))  # still runs


@pytest.mark.kernels
def test_two_stacked_grus_train_twice_the_batch_in_the_plain_steps_memory():
    """Two GRUs of 128 over 256 tokens: the plain step at batch 8 (its loops one iteration at a
    time, as LMS runs them), then LMS at batch 16 given that much device memory, each in a
    fresh process. Whole lists swapped between the loops cannot fit: one layer's lists at batch
    16 are the floor (over 128 tokens they fit, and nothing is streamed). Streamed they do,
    measured (here 14.6 MB of 23)."""
    device = run_child("_lstm_step.py", "256", "8", "2", "128", "serial", "gru")[1]["measured"]
    ran = run_child("_lstm_step.py", "256", "16", "2", "128", str(device), "gru")[1]
    assert (ran["streamed_lists"] or 0) > 0, (ran, device)
    assert ran["measured"] <= device, (ran, device)


@pytest.mark.parametrize("split", ["off", "auto"])
def test_the_closest_plan_after_streaming_runs_on_the_streamed_graph(split):
    """Nothing fits even streamed: the closest plan the closed loop measures is the streamed
    graph's (it was planned on the streamed analysis: rewriting the traced one with it failed
    on ops the trace does not have)."""
    budget = _budget_for_twice_the_batch()
    step, x, y = _gru_step(16)
    planner = lms.LMS(device_memory=int(budget / 0.9 / 3), calibration_steps=0, split=split)
    request = Request(keep_closest=True)
    prepared = planner.pipeline.prepare(step, (x, y), request)
    assert not prepared.report.fits and prepared.report.streamed_lists
    names = [op.name for op in prepared.planned.analysis.ops]
    assert any(f"{STREAM_SCOPE}_shape" in name for name in names)  # the streamed graph's
    assert float(prepared.callable(x, y)) > 0
