"""lms/tuning/tuner.py: the tuner enforces an order when the free one cannot fit.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest
from lms_equivalence import unet_case

import lms

pytestmark = pytest.mark.compat


def test_the_tuner_enforces_an_order_when_the_free_one_cannot_fit():
    case = unet_case(resolution=48)
    analysis = lms.internal.analyze(case.step.get_concrete_function(case.images, case.labels).graph)
    everything = {o: lms.Parameters(1, 1, 0, ordering=o) for o in (0, 1)}
    free, ordered = (
        lms.internal.simulate(analysis, lms.internal.plan(analysis, everything[o])) for o in (0, 1)
    )
    assert ordered.peak_bytes < 0.9 * free.peak_bytes
    budget = (free.peak_bytes + ordered.peak_bytes) // 2
    tuned = lms.internal.tune(analysis, budget, lms.Parameters())
    assert tuned.parameters.ordering == 1 and tuned.simulation.peak_bytes <= budget
    assert tuned.plan.order is not None and not tuned.plan.serialized_levels
    with pytest.raises(lms.NothingFitsError):
        lms.internal.tune(analysis, budget, lms.Parameters(ordering=0))
    roomy = lms.internal.tune(analysis, free.peak_bytes + 1, lms.Parameters(ordering=0))
    assert roomy.parameters.ordering == 0 and roomy.plan.order is None
