"""lms/graph/passes.py: a slice of the first axis is a view of its input's buffer where
TensorFlow makes it one (rows of aligned bytes), a copy elsewhere, in the analysis as measured.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import tensorflow as tf

import lms
from lms.graph.passes import DIM0_VIEW_ALIGNMENT, dim0_view_input

pytestmark = pytest.mark.compat
ROOT = Path(__file__).resolve().parents[3]
ROWS = 256


def _sliced(columns: int, how: str):
    """A step that slices exp(x) ([ROWS, columns]) and sums the slice and the whole: `how`
    "rows" (the first axis: a view where aligned), "columns" (a copy)."""

    @tf.function
    def step(x):
        whole = tf.exp(x)
        part = whole[1 : ROWS - 1] if how == "rows" else whole[:, 1 : columns - 1]
        return tf.reduce_sum(part, 0)[:1] + tf.reduce_sum(whole, 0)[:1]

    return step


CASES = [(1024, "rows", True), (1001, "rows", False), (1024, "columns", False)]


@pytest.mark.parametrize(("columns", "how", "view"), CASES)
def test_a_first_axis_slice_is_a_view_when_its_rows_are_aligned(columns, how, view):
    """The slice aliases its input in the analysis (its bytes are the input's buffer's) exactly
    when TensorFlow returns a view: rows of a multiple of DIM0_VIEW_ALIGNMENT bytes; the
    simulated peak then holds one [ROWS, columns] buffer at once, else two."""
    spec = tf.TensorSpec((ROWS, columns), tf.float32)
    graph = _sliced(columns, how).get_concrete_function(spec).graph
    slice_op = next(op for op in graph.get_operations() if op.type == "StridedSlice")
    assert (dim0_view_input(slice_op) == 0) is view
    assert (columns * 4 % DIM0_VIEW_ALIGNMENT == 0 and how == "rows") is view
    analysis = lms.internal.analyze(graph)
    held = lms.internal.simulate(analysis).peak_bytes - analysis.resident_bytes
    size = ROWS * columns * 4
    assert (size <= held < 1.2 * size) if view else (1.9 * size <= held < 2.2 * size), held


CHILD = """
import json, sys
import tensorflow as tf
sys.path.insert(0, {tests!r})
from test_passes import ROWS, _sliced
import lms
found = {{}}
for columns, how in {cases!r}:
    step = _sliced(columns, how)
    x = tf.random.normal([ROWS, columns])
    analysis = lms.internal.analyze(step.get_concrete_function(x).graph)
    simulated = lms.internal.simulate(analysis).peak_bytes - analysis.resident_bytes
    step(x).numpy()
    tf.config.experimental.reset_memory_stats("CPU:0")
    before = tf.config.experimental.get_memory_info("CPU:0")["current"]
    step(x).numpy()
    measured = tf.config.experimental.get_memory_info("CPU:0")["peak"] - before
    found[f"{{columns}} {{how}}"] = (simulated, measured)
print(json.dumps(found))
"""


def test_the_views_peak_is_measured_as_simulated():
    """In a fresh process with TensorFlow's allocator measured: each case's step peaks at what the
    analysis simulates for it (a view adds no buffer, a copy one), within 10 %."""
    env = {**os.environ, "TF_CPU_ALLOCATOR_USE_BFC": "true", "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    cases = [(columns, how) for columns, how, _ in CASES]
    code = CHILD.format(tests=str(Path(__file__).parent), cases=cases)
    completed = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    found = json.loads(completed.stdout.strip().splitlines()[-1])
    for name, (simulated, measured) in found.items():
        assert 0.9 <= measured / simulated <= 1.1, (name, simulated, measured)
