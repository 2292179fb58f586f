"""suite/units.py and every size a person writes for the suite: a size without its unit is
refused with lms's hint, naming the option or the file and field (spec memory_budget, an `lms`
table's device_memory, `inv plan --device-memory`)."""

import pytest

from suite.errors import SpecError, SuiteError
from suite.specs import parse_spec
from suite.units import parse_size

SPEC = """
name = "t"
[defaults]
steps = 5
{defaults}
[[study]]
name = "a"
kind = "throughput"
workload = "googlenet"
resolution = 64
batch = 2
{study}
"""


def test_an_option_without_a_unit_is_refused_with_a_hint():
    with pytest.raises(SuiteError) as raised:
        parse_size("--device-memory", "1.5")
    assert str(raised.value) == ("--device-memory '1.5' has no unit: write e.g. 1.5GiB or 1536MiB")
    assert parse_size("--device-memory", "16GiB") == 16 * 2**30
    with pytest.raises(SuiteError, match="^--device-memory 'lots': a size like 16GiB, 512MiB"):
        parse_size("--device-memory", "lots")


@pytest.mark.parametrize(
    "defaults, study, field, shown",
    [
        ('memory_budget = "1.5"', "", "defaults.memory_budget", "1.5GiB or 1536MiB"),
        ("memory_budget = 1000", "", "defaults.memory_budget", "1000GiB or 1024000MiB"),
        ("", 'lms = {device_memory = "16"}', "study[0].lms.device_memory", "16GiB or 16384MiB"),
    ],
)
def test_a_spec_size_without_a_unit_names_file_and_field(defaults, study, field, shown):
    with pytest.raises(SpecError) as raised:
        parse_spec(SPEC.format(defaults=defaults, study=study), "specs/t.toml")
    assert raised.value.field == field
    assert str(raised.value).startswith(f"specs/t.toml: field '{field}'")
    assert shown in str(raised.value)


def test_sizes_with_their_unit_or_integers_of_bytes_load_as_before():
    text = SPEC.format(
        defaults="memory_budget = 1073741824", study='lms = {device_memory = "1GiB"}'
    )
    (trial,) = parse_spec(text, "specs/t.toml").trials
    assert trial.params.memory_budget_bytes == 2**30 and trial.params.lms["device_memory"] == 2**30
