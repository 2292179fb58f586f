"""The limits table's swap-only bound: from the LMS report of the trial at the LMS-on limit."""

from report_cases import (
    HOST,
    LMS_EVERYTHING,
    MIB,
    POOL_GRAD,
    RELU_GRAD,
    lms_report,
    record,
    search_record,
    write_record,
)

from suite.records import store_host
from suite.reporting.report import render_report


def test_the_limits_table_shows_the_swap_only_bound_and_its_op(tmp_path):
    """The bound, from the LMS report of the trial at the LMS-on limit: with 300 MiB, 60 MiB of
    variables, the largest op 74 MiB and inputs 6 MiB at 256px, the floor reaches the budget at
    256² × 240 / 80 = 3 × 256² pixels: 7.68× the LMS-off 160², at 256 × √3 ≈ 443px."""
    ref = store_host(tmp_path, HOST)

    def search(host, kind, largest_off, largest_on, on_trials):
        """An LMS-off and an LMS-on search; on_trials: (value, outcome, LMS report or None)."""
        searched = "resolution" if kind == "max-resolution" else "batch"
        modes = [("on", largest_on)] + ([("off", largest_off)] if largest_off != "missing" else [])
        for mode, largest in modes:
            made = search_record(host, ref, kind, mode, largest, None)
            if mode == "on":
                for value, outcome, report in on_trials:
                    spec_hash = f"{host}-{kind}-{value}"
                    trial = record(host, ref, spec_hash, 2.0, 0.1, outcome=outcome)
                    trial["spec"]["search"] = made["search_hash"]
                    trial["params"].update(
                        {searched: value, "lms": LMS_EVERYTHING, "memory_budget_bytes": 300 * MIB}
                    )
                    if report is not None:
                        trial["metrics"] = {**(trial["metrics"] or {}), "lms": report}
                    write_record(tmp_path, trial)
                    made["trials"].append(
                        {
                            "value": value,
                            "spec_hash": spec_hash,
                            "outcome": outcome,
                            "reused": False,
                            "peak_memory_bytes": None,
                            "images_per_sec": 2.0,
                            "repeat": 0,
                        }
                    )
            write_record(tmp_path, made)

    oom = "out_of_memory"
    relu = lms_report(60 * MIB, 6 * MIB, RELU_GRAD, 74 * MIB)
    pool = lms_report(60 * MIB, 2 * MIB, POOL_GRAD, 78 * MIB)
    # with the closed loop the bound is the device LMS was given (380 MiB), not its budget (300)
    pool["calibration"] = {
        "limit_bytes": 300 * MIB,
        "device_limit_bytes": 380 * MIB,
        "accepted": True,
        "corrections": 0,
        "attempts": [],
    }
    smaller = lms_report(60 * MIB, 4 * MIB, "googlenet_1/conv3_1/Relu", 50 * MIB)
    larger = lms_report(60 * MIB, 8 * MIB, "googlenet_1/conv3_1/Relu", 99 * MIB)
    # the trial at the limit sets the bound, not a smaller or a larger one
    search(
        "alpha",
        "max-resolution",
        160,
        256,
        [(208, "ok", smaller), (256, "ok", relu), (304, oom, larger)],
    )
    # batch 12: 12 × (380 - 60) / (78 + 2) = 48 samples, 12× the LMS-off 4
    search("alpha", "max-batch", 4, 12, [(12, "ok", pool)])
    # records written before trials carried LMS reports, and a search without its LMS-off half
    search("beta", "max-resolution", 160, 256, [(256, "ok", None)])
    search("beta", "max-batch", "missing", 12, [(12, "ok", pool)])
    # nothing trained without LMS, and the limit's trial has no report: the largest trial that
    # has one (304px, out of memory) says 304² × 3 pixels, ≈ 527px; nothing trained with LMS
    search("gamma", "max-resolution", None, 256, [(256, "ok", None), (304, oom, relu)])
    search("gamma", "max-batch", 4, None, [(8, oom, pool)])
    # a report with the op's footprint (its buffers and its kernel's temporary) is bounded by
    # that, not by TFLMSv2's largest operation: 256² × 240 / (114 + 6) = 2 × 256² pixels
    with_floor = lms_report(60 * MIB, 6 * MIB, RELU_GRAD, 74 * MIB)
    floor = {"name": POOL_GRAD, "bytes": 114 * MIB, "temporary_bytes": 20 * MIB}
    with_floor["analysis"]["floor_op"] = floor
    search("delta", "max-resolution", 160, 256, [(256, "ok", with_floor)])
    text = render_report(tmp_path, tmp_path / "out").read_text()
    limits = text[text.index("## Limits") :]
    header = next(line for line in limits.splitlines() if line.startswith("| workload"))
    assert [c.strip() for c in header.split("|")[6:9]] == ["LMS on", "LMS gain", "swap-only bound"]
    cells = {}
    for line in limits.splitlines():
        if line.startswith("| googlenet"):
            row = [c.strip() for c in line.split("|")[1:-1]]
            cells[(row[2], row[1].split(" (")[0])] = row[6:8]
    assert cells[("alpha", "max resolution")] == [
        "2.56× pixels",
        "≈ 7.68× (443), set by conv1_1/ReluGrad",
    ]
    assert cells[("alpha", "max batch")] == [
        "3.00× batch",
        "≈ 12.00× (48), set by pool1_1/MaxPool2d/MaxPoolGrad",
    ]
    assert cells[("beta", "max resolution")] == ["2.56× pixels", "—"]
    assert cells[("beta", "max batch")] == ["—", "—"]
    assert cells[("gamma", "max resolution")] == ["only with LMS", "≈ 527, set by conv1_1/ReluGrad"]
    assert cells[("gamma", "max batch")] == ["—", "—"]
    bounded_by_pool = "≈ 5.12× (362), set by pool1_1/MaxPool2d/MaxPoolGrad"
    assert cells[("delta", "max resolution")] == ["2.56× pixels", bounded_by_pool]
