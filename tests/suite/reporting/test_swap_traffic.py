"""Swap traffic per step beside throughput, and a bandwidth only where a copy was timed."""

from report_cases import HOST, LMS_EVERYTHING, record, traffic, write_record

from suite.records import store_host
from suite.reporting.report import render_report


def test_swap_bandwidth_is_shown_only_where_a_copy_was_timed(tmp_path):
    """An emulated link's transfers give a bandwidth (bytes over all processes' seconds); the
    emulated device without a link says there was no copy; an old record's bookkeeping
    "bandwidth" is not shown; a GPU step nobody profiled says so."""
    ref = store_host(tmp_path, HOST)
    cases = {
        # two processes: 131 MiB in 0.07 + 0.07 s out, 189 MiB in 0.1 and 0.3 s in
        "link": [traffic("emulated link", 0.07, 0.1), traffic("emulated link", 0.07, 0.3)],
        "nolink": [traffic("none")],
        "gpu": [traffic("not profiled") | {"source": "plan"}],
        # before version 2: seconds in the swap ops, "54 / 85 GB/s" of dictionary lookups
        "old": [traffic(None, 131 * 2**20 / 54e9, 189 * 2**20 / 85e9)],
        "mixed": [traffic("emulated link", 0.07, 0.1), traffic("none")],
    }
    for spec_hash, traffics in cases.items():
        for repeat, measured in enumerate(traffics):
            made = record("alpha", ref, spec_hash, 3.0, 0.1, repeat=repeat)
            made["params"]["lms"] = LMS_EVERYTHING
            if spec_hash == "old":
                del measured["version"], measured["copy"]  # fields version 2 added
            made["metrics"]["lms_traffic"] = measured
            write_record(tmp_path, made)
    text = render_report(tmp_path, tmp_path / "out").read_text()

    def cell(spec_hash):
        section = text[text.index(f"Spec hash `{spec_hash}`") :]
        row = next(line for line in section.splitlines() if line.startswith("| alpha"))
        return next(c.strip() for c in row.split("|") if "swaps" in c)

    out_rate = 2 * 131 * 2**20 / 0.14 / 1e9
    in_rate = 2 * 189 * 2**20 / 0.4 / 1e9
    assert cell("link") == (
        f"131 MiB / 189 MiB (143 / 194 swaps; emulated link's transfers "
        f"{out_rate:.3g} / {in_rate:.3g} GB/s)"
    )
    assert cell("nolink") == (
        "131 MiB / 189 MiB (143 / 194 swaps; no copy: emulated device without a link)"
    )
    assert cell("gpu").endswith("swaps; GPU copies not profiled)")
    assert cell("old").endswith("swaps; bandwidth not measured (record before swap traffic v2))")
    assert "GB/s" not in cell("old")
    assert cell("mixed").endswith(" GB/s in 1 of 2 processes)")


# Swap traffic measured by a GPU's copy events: what ran, with the plan beside it.
def measured_by_copy_events(out_bytes, in_bytes, swaps, seconds):
    """A GPU record's traffic after `profile()`: the matched copies' bytes, swaps and seconds
    per step, and the plan's (131 MiB / 189 MiB, 143 / 194 swaps)."""
    made = traffic("GPU copy events") | {"source": "copy events"}
    made.update(
        out_bytes_per_step=out_bytes,
        in_bytes_per_step=in_bytes,
        swap_outs_per_step=swaps[0],
        swap_ins_per_step=swaps[1],
        out_seconds_per_step=seconds[0],
        in_seconds_per_step=seconds[1],
        out_bandwidth=out_bytes / seconds[0] if seconds[0] else None,
        in_bandwidth=in_bytes / seconds[1] if seconds[1] else None,
        planned_out_bytes_per_step=131 * 2**20,
        planned_in_bytes_per_step=189 * 2**20,
        planned_swap_outs_per_step=143,
        planned_swap_ins_per_step=194,
        other_copies={"in": {"copies": 1, "bytes": 6 * 2**20, "seconds": 1e-3}},
    )
    return made


def test_copy_events_show_what_ran_beside_the_plan(tmp_path):
    """Measured bytes and swaps first, the plan's beside them, then the matched copies'
    bandwidth; a step where no copy matched a swap shows zero swaps against the plan, not the
    plan; the two-device mode says why nothing was timed."""
    ref = store_host(tmp_path, HOST)
    cases = {
        "all": measured_by_copy_events(131 * 2**20, 189 * 2**20, (143, 194), (0.01, 0.02)),
        "none": measured_by_copy_events(0, 0, (0, 0), (None, None)),
        "two": traffic("two devices") | {"source": "plan"},
    }
    for spec_hash, measured in cases.items():
        made = record("alpha", ref, spec_hash, 3.0, 0.1)
        made["params"]["lms"] = LMS_EVERYTHING
        made["metrics"]["lms_traffic"] = measured
        write_record(tmp_path, made)
    text = render_report(tmp_path, tmp_path / "out").read_text()

    def cell(spec_hash):
        section = text[text.index(f"Spec hash `{spec_hash}`") :]
        row = next(line for line in section.splitlines() if line.startswith("| alpha"))
        return next(c.strip() for c in row.split("|") if "swaps" in c)

    out_rate, in_rate = 131 * 2**20 / 0.01 / 1e9, 189 * 2**20 / 0.02 / 1e9
    assert cell("all") == (
        "131 MiB / 189 MiB (143 / 194 swaps; planned 131 MiB / 189 MiB, 143 / 194 swaps; "
        f"GPU's copies {out_rate:.3g} / {in_rate:.3g} GB/s)"
    )
    assert cell("none") == (
        "0 B / 0 B (0 / 0 swaps; planned 131 MiB / 189 MiB, 143 / 194 swaps; GPU's copies — / — "
        "GB/s)"
    )
    assert cell("two").endswith("swaps; no copy events: two logical CPU devices)")
