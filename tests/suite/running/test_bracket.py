"""The boundary search: always the exact boundary, few probes when the prediction is right."""

import pytest

from suite.running.bracket import bracket_search


def search(count, boundary, predicted):
    probed = []

    def probe(index):
        assert index not in probed, "a candidate is never probed twice"
        probed.append(index)
        return index <= boundary

    return bracket_search(count, probe, predicted), probed


@pytest.mark.parametrize("count", [1, 2, 3, 7, 31])
def test_finds_the_boundary_from_any_prediction(count):
    for boundary in range(-1, count):
        for predicted in [None, -1, *range(count)]:
            bracket, _ = search(count, boundary, predicted)
            assert (bracket.passed, bracket.failed) == (boundary, boundary + 1)
            assert bracket.settled


def test_a_right_prediction_costs_two_probes_and_a_wrong_one_logarithmically_more():
    for boundary in range(31):
        bracket, probed = search(31, boundary, boundary)
        assert probed[0] == boundary and len(probed) <= 2
    _, far = search(1000, 900, 100)
    assert len(far) <= 2 * 10 + 2  # vs 800 steps of +1


def test_probe_order_is_reported_and_remaining_estimates_shrink():
    seen = []
    bracket = bracket_search(
        64, lambda i: i <= 40, 10, lambda b, i: seen.append(b.remaining_probes())
    )
    assert [i for i, _ in bracket.probes][0] == 10
    assert seen[-1] <= seen[1] and bracket.remaining_probes() == 0


def test_no_candidates_is_an_error():
    with pytest.raises(ValueError):
        bracket_search(0, lambda i: True)
