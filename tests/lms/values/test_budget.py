"""lms/values/budget.py: sizes as people write them, a size without its unit refused with a hint,
and
the budget a plan may fill."""

import pytest

import lms
from lms.values.budget import budget_bytes


@pytest.mark.parametrize(
    "value, size",
    [
        ("1GiB", 2**30),
        ("512 MiB", 512 * 2**20),
        ("1.5GB", 1_500_000_000),
        ("100B", 100),
        (2**20, 2**20),
        (16 * 2**30, 16 * 2**30),
    ],
)
def test_sizes_with_their_unit_or_integers_of_bytes(value, size):
    assert lms.parse_size(value) == size


@pytest.mark.parametrize(
    "value, message, hint",
    [
        (
            "1.5",
            "device_memory '1.5' has no unit: write e.g. 1.5GiB or 1536MiB",
            "1.5GiB or 1536MiB",
        ),
        (1.5, "device_memory 1.5 has no unit: write e.g. 1.5GiB or 1536MiB", "1.5GiB or 1536MiB"),
        ("16", "device_memory '16' has no unit: write e.g. 16GiB or 16384MiB", "16GiB or 16384MiB"),
        (
            1000,
            "device_memory 1000 has no unit and is below 1 MiB as bytes: write e.g. 1000GiB",
            "1000GiB or 1024000MiB",
        ),
        ("3145728", "device_memory '3145728' has no unit: write e.g. 3145728B or 3MiB", None),
    ],
)
def test_a_size_without_its_unit_is_refused_with_a_hint(value, message, hint):
    """`inv plan --device-memory 1.5` planned for 1 byte: a bare number could be bytes or GiB."""
    with pytest.raises(lms.ParameterError) as raised:
        lms.parse_size(value, "device_memory")
    assert str(raised.value).startswith(message)
    assert raised.value.hint == (hint or "3145728B or 3MiB")


@pytest.mark.parametrize("value", ["lots", "1e400GiB", [1], float("nan"), True, "5 parsecs"])
def test_what_is_no_size_at_all_says_what_a_size_is(value):
    with pytest.raises(lms.ParameterError, match="must be a size like 16GiB") as raised:
        lms.parse_size(value, "device_memory")
    assert raised.value.hint is None


@pytest.mark.parametrize("value", [0, -5, "0GiB", "0"])
def test_a_size_must_be_positive(value):
    with pytest.raises(lms.ParameterError, match="must be positive"):
        lms.parse_size(value, "device_memory")


def test_the_budget_is_the_device_less_the_reserve_times_the_safety_ratio():
    assert budget_bytes(2**30, "256MiB", 0.5) == (2**30 - 2**28) // 2
    assert budget_bytes(100, None, 1.0) == 100  # parsed bytes: no unit to ask for
    with pytest.raises(lms.ParameterError, match="leaves nothing"):
        budget_bytes(2**30, "1GiB", 0.9)
