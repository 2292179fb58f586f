"""The order the simulator runs a step's ops in: one op per step, in execution-level order or in
a plan's enforced order."""

from typing import NamedTuple

import numpy as np

from lms.graph.step import Analysis, CacheKey, Fact
from lms.planning.ordering import order_positions
from lms.planning.planner import Plan


class Schedule(NamedTuple):
    step_of: np.ndarray  # per op, the step it runs at
    steps: int


# Ops that only rename their inputs (output k is input k): Grappler's dependency optimizer removes
# them, so they gate nothing at run time. Keras 3's optimizer passes every gradient through one
# IdentityN; taken as a barrier it would keep all gradients alive until the first update.
TRANSPARENT_OPS = frozenset({"Identity", "IdentityN"})


def execution_levels(analysis: Analysis) -> np.ndarray:
    """Each op's level when transparent ops do not gate their readers (longest path)."""
    level_of = np.zeros(len(analysis.ops), dtype=np.int64)
    ready = np.zeros(len(analysis.tensors), dtype=np.int64)  # level after which a tensor exists
    for wave in analysis.levels:  # analysis levels are a topological order
        for i in wave:
            op = analysis.ops[i]
            level = 0
            for t in op.inputs:
                level = max(level, ready[t] + 1)
            for c in op.control_inputs:
                level = max(level, level_of[c] + 1)
            level_of[i] = level
            if op.type in TRANSPARENT_OPS and len(op.inputs) == len(op.outputs):
                for source, t in zip(op.inputs, op.outputs, strict=True):
                    ready[t] = ready[source]
            else:
                ready[op.outputs] = level
    return level_of


def schedule(analysis: Analysis, plan: Plan | None = None) -> Schedule:
    """Step index of every op, and the number of steps: one op per step. A plan with an enforced
    order runs in that order; otherwise in execution-level order (ties by creation order): GPUs
    run kernels one stream at a time, and the CPU executor's inter-op threads are few;
    concurrency is added back as the overlap term of `simulate`."""
    if plan is not None and plan.order is not None:
        return Schedule(order_positions(analysis), len(plan.order))
    if CacheKey(Fact.SCHEDULE) not in analysis.cache:
        levels = execution_levels(analysis)
        order = np.lexsort((np.arange(len(levels)), levels))
        step_of = np.empty(len(levels), dtype=np.int64)
        step_of[order] = np.arange(len(levels))
        analysis.cache[CacheKey(Fact.SCHEDULE)] = Schedule(step_of, len(levels))
    return analysis.cache[CacheKey(Fact.SCHEDULE)]
