"""suite/lms_seam.py: the disk a host lends LMS (`inv run --host-disk`) reaches lms.LMS beside
the spec's `lms` table, never in it, and the host check of a plan that does not run counts it."""

from record_cases import PARAMS

import lms
from suite.lms_seam import check_lms_table, host_memory_shortfall, lms_options

MIB = 2**20


def test_a_disk_is_an_option_of_the_trials_lms_and_not_a_parameter(tmp_path):
    params = PARAMS.replace(lms=check_lms_table({}), memory_budget_bytes=2**30)
    assert lms_options(params, tmp_path)["host_disk"] == str(tmp_path)
    assert "host_disk" not in lms_options(params)
    assert lms_options(PARAMS, tmp_path) is None  # LMS off: no disk


def test_a_plan_the_memory_cannot_hold_fits_with_a_disk_on_the_emulated_device_only(tmp_path):
    """A GiB of host arrays beside a 100 MiB device, in 200 MiB of host memory: short without a
    disk; with one, the disk holds what the store's share of the memory cannot; a GPU's host
    arrays (pinned memory) have no disk tier."""
    report = lms.PlanReport.from_dict({"host_peak_bytes": 2**30, "peak_bytes_with_lms": 100 * MIB})
    assert host_memory_shortfall(report, 200 * MIB, True).startswith("host memory: the plan")
    assert host_memory_shortfall(report, 200 * MIB, True, disk=tmp_path) is None
    assert host_memory_shortfall(report, 200 * MIB, False, disk=tmp_path) is not None
    assert host_memory_shortfall(report, None, True, disk=tmp_path) is None  # not checked
