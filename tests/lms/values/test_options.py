"""lms/values/options.py: every option of LMS(...) in one typed place (lms.Options); every wrong one
gets one clear error, the same from lms.check_options, without TensorFlow.
Marked compat: also run on TensorFlow 2.14.1 (Keras 2)."""

import subprocess
import sys

import pytest

import lms

pytestmark = pytest.mark.compat


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"swapout_threshold": 0}, "swapout_threshold must be an integer >= 1 or -1"),
        ({"swapin_ahead": -2}, "swapin_ahead must be an integer >= 1"),
        ({"swapin_groupby": 1.5}, "swapin_groupby must be an integer >= 0"),
        ({"sync_mode": 4}, "sync_mode must be 0, 1, 2 or 3; received 4"),
        ({"serialization": ["x"]}, "serialization must be a list of levels"),
        ({"serialization": ["5:3"]}, "is empty"),
        ({"serialization_by_size": -1}, "serialization_by_size must be a number of GiB"),
        ({"mechanism": "teleport"}, "mechanism must be one of"),
        ({"allocator": "malloc"}, "allocator must be one of"),
        ({"safety_ratio": 0}, "safety_ratio must be a number in (0, 1]; received 0"),
        ({"device_memory": "lots"}, "device_memory must be a size like 16GiB"),
        ({"device_memory": "1GiB", "reserve": "2GiB"}, "leaves nothing"),
        ({"device_memory": float("nan")}, "device_memory must be a size like 16GiB"),
        ({"device_memory": float("inf")}, "device_memory must be a size like 16GiB"),
        ({"device_memory": "1e400GiB"}, "received '1e400GiB'"),
        ({"device_memory": [1]}, "device_memory must be a size like 16GiB"),
        ({"device_memory": 1.5}, "device_memory 1.5 has no unit: write e.g. 1.5GiB or 1536MiB"),
        ({"device_memory": "1.5"}, "device_memory '1.5' has no unit: write e.g. 1.5GiB"),
        ({"device_memory": 1000}, "device_memory 1000 has no unit and is below 1 MiB as bytes"),
        ({"reserve": "512"}, "reserve '512' has no unit: write e.g. 512GiB or 524288MiB"),
        ({"calibration_steps": -1}, "calibration_steps must be an integer >= 0; received -1"),
        ({"max_corrections": True}, "max_corrections must be an integer >= 0; received True"),
        ({"calibration_cache": 3}, "calibration_cache must be a file path or None; received 3"),
        ({"link": {"bandwidth": "1GB/s"}, "mechanism": "device-copy"}, "link emulates"),
        ({"safety_ratio": "x"}, "safety_ratio must be a number in (0, 1]; received 'x'"),
        ({"safety_ratio": float("nan")}, "safety_ratio must be a number in (0, 1]"),
        ({"batch_size": "x"}, "batch_size must be an integer >= 1; received 'x'"),
        ({"batch_size": 0}, "batch_size must be an integer >= 1; received 0"),
        ({"ordering": 2}, "ordering must be 0 (free), 1 (depth-first) or -1 (auto); received 2"),
        ({"ordering": True}, "ordering must be 0 (free), 1 (depth-first) or -1"),
    ],
)
def test_bad_parameters_get_a_clear_error(kwargs, message):
    kwargs.setdefault("device_memory", "1GiB")
    with pytest.raises(lms.ParameterError) as raised:
        lms.LMS(**kwargs)
    assert message in str(raised.value)
    with pytest.raises(lms.ParameterError) as checked:  # the same check, without TensorFlow
        lms.check_options(**kwargs)
    assert str(checked.value) == str(raised.value)


def test_checking_options_and_sizes_imports_no_tensorflow():
    """What a spec loader or a record reader uses costs no TensorFlow import."""
    code = (
        "import sys, lms; lms.check_options(device_memory='2GiB', swapout_threshold=3); "
        "lms.Options(reserve='1GiB', safety_ratio=0.5).parameters; "
        "assert lms.parse_size('1.5 GB') == 1_500_000_000; "
        "assert lms.parse_size(2**20) == 2**20; "
        "lms.Parameters(2, 1, 0); lms.LMSError, lms.ParameterError, lms.NothingFitsError; "
        "lms.PlanReport, lms.SwapTraffic, lms.Timeline, lms.AnalysisSummary; "
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_options_hold_every_default_once_and_normalize():
    """`LMS(...)` takes exactly `lms.Options`' fields, with Options' defaults."""
    options = lms.check_options("1GiB", serialization="2:4", link={"bandwidth": "16GB/s"})
    assert isinstance(options, lms.Options)
    assert options.serialization == ("2:4",) and options.parameters.serialization == ((2, 4),)
    assert isinstance(options.link, lms.Link) and options.device_bytes == 2**30
    planner = lms.LMS("1GiB")
    assert planner.options == lms.Options("1GiB")
    assert planner.budget == int(2**30 * lms.Options().safety_ratio)
    with pytest.raises(TypeError):
        lms.check_options("1GiB", swapout_thresold=3)  # a misspelt option


def test_without_device_memory_the_rest_is_checked_all_the_same():
    """No device memory (the GPU's is read later): reserve and safety ratio are still checked,
    without a stand-in budget."""
    assert lms.check_options().device_bytes is None
    with pytest.raises(lms.ParameterError, match="safety_ratio must be a number in"):
        lms.check_options(safety_ratio=1.5)
    with pytest.raises(lms.ParameterError, match="reserve 'lots' must be|reserve must be a size"):
        lms.check_options(reserve="lots")
