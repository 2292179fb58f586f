"""The report's first table: LMS off and on per host, the limits, each host against the reference,
and a flag on rates measured on a busy machine."""

import copy

from report_cases import HOST, LMS_EVERYTHING, record, search_record, write_record

from suite.records import store_host
from suite.reporting.report import render_report


def test_the_report_leads_with_the_answer(tmp_path):
    """First table: LMS off and on per host (between-process uncertainty), the limits off -> on,
    and each host against the reference, "no significant difference" where the interval holds 1."""
    other = copy.deepcopy(HOST)
    other.update(architecture="ppc64le")
    refs = {"alpha": store_host(tmp_path, HOST), "beta": store_host(tmp_path, other)}
    spread = (1.0, 0.96, 1.05)
    # beta is 1.8x faster with LMS off; with LMS on its processes scatter widely
    rates = {"alpha": (10.0, 8.0, (1.0, 0.96, 1.05)), "beta": (18.0, 8.5, (0.6, 1.0, 1.5))}
    for host, (off, on, on_spread) in rates.items():
        for repeat in range(3):
            off_record = record(host, refs[host], "off1", off * spread[repeat], 0.1, repeat=repeat)
            write_record(tmp_path, off_record)
            lms = record(host, refs[host], "on1", on * on_spread[repeat], 0.1, repeat=repeat)
            lms["params"]["lms"] = LMS_EVERYTHING
            write_record(tmp_path, lms)
        for kind, mode, largest in (
            ("max-resolution", "off", 416),
            ("max-resolution", "on", 832),
            ("max-batch", "off", 4),
            ("max-batch", "on", 12),
        ):
            write_record(tmp_path, search_record(host, refs[host], kind, mode, largest, None))
    text = render_report(tmp_path, tmp_path / "out").read_text()
    first = text.index("## The answer")
    assert first < text.index("## Details per configuration") and "## Hosts" in text
    answer = text[first : text.index("## Details per configuration")]
    lines = {line.split("|")[1].strip(): line for line in answer.splitlines() if "| 64px" in line}
    assert set(lines) == {"alpha", "beta"}
    cells = [c.strip() for c in lines["alpha"].split("|")[1:-1]]
    assert cells[2] == "10 ± 0.26 (3 processes)" and cells[4] == "0.80× (0.72–0.89)"
    assert cells[5] == "416 → 832 (4.00× pixels)" and cells[6] == "4 → 12 (3.00× batch)"
    assert cells[7] == "reference" and "vs alpha (LMS on)" in answer
    beta = [c.strip() for c in lines["beta"].split("|")[1:-1]]
    assert beta[7].endswith("no significant difference)")  # LMS on: 1.06x, processes 0.6-1.5
    # the details: headings differ when only LMS does; budgets in units; a blank line before tables
    assert "## googlenet — 64px, batch 2, fp32, LMS off" in text
    assert "## googlenet — 64px, batch 2, fp32, LMS on (swapout_threshold 1, swapin_ahead 1" in text
    for number, line in enumerate(text.splitlines()):
        if line.startswith("|") and not text.splitlines()[number - 1].startswith("|"):
            assert text.splitlines()[number - 1] == "", line
    assert "None" not in text


def test_a_measurement_on_a_busy_machine_is_flagged_wherever_its_rate_appears(tmp_path):
    """Three processes of one configuration, one measured while other processes held 1.2 of 2
    cores: the answer and the configuration's table say so; quiet and older records do not."""
    ref = store_host(tmp_path, HOST)
    loads = [0.1, 1.2, None]  # None: a record from before the load was measured
    for repeat, others in enumerate(loads):
        made = record("h1", ref, "aaa", 10.0 + repeat, 0.1, repeat=repeat)
        if others is not None:
            made["metrics"]["machine_load"] = {
                "cores": 2,
                "load_average_1m": {"before": 1.0, "after": 1.5},
                "busy_cores": {"mean": others + 1.0, "max": others + 1.5},
                "other_cores": {"mean": others, "max": others + 0.5},
                "seconds": 3.0,
            }
        write_record(tmp_path, made)
    write_record(tmp_path, record("h2", ref, "aaa", 9.0, 0.1))
    text = render_report(tmp_path, tmp_path / "out").read_text()
    flag = "⚠ 1 on a busy machine (others used 1.2 of 2 cores)"
    answer = text[text.index("## The answer") : text.index("## Details per configuration")]
    details = text[text.index("## Details per configuration") :]
    for part in (answer, details):
        (h1,) = [line for line in part.splitlines() if line.startswith("| h1 ")]
        (h2,) = [line for line in part.splitlines() if line.startswith("| h2 ")]
        assert flag in h1 and "busy" not in h2
    assert '"⚠ k on a busy machine": k of the processes' in " ".join(answer.split())
