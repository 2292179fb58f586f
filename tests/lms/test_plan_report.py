"""lms/plan_report.py: the report's timeline is pooled and keeps the peak.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import pytest

pytestmark = pytest.mark.compat


@pytest.mark.compat
def test_report_timeline_is_pooled_and_keeps_the_peak():
    from lms.plan_report import TIMELINE_POINTS, _pooled

    values = list(range(1000)) + [10**9] + list(range(1000))
    pooled = _pooled(values)
    assert len(pooled) <= TIMELINE_POINTS and max(pooled) == 10**9
    assert _pooled([1, 2, 3]) == (1, 2, 3)
