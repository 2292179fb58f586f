"""The throughput bar chart: every LMS setting its own bar, colour, hatch and legend entry."""

from report_cases import LMS_EVERYTHING, record, trial


def test_the_throughput_plot_draws_each_lms_setting_apart_with_a_legend(tmp_path):
    """LMS off and on of the same configuration on the same host: side by side, not on top of
    each other; one colour and hatch per setting, each once in the legend; error bars kept."""
    from suite.reporting.figures import discard
    from suite.reporting.report import _group
    from suite.reporting.throughput_plot import draw_throughput, throughput_bars

    records = []
    for host in ("alpha", "beta"):
        records.append(record(host, "r", "off", 10.0, 0.5))
        on = record(host, "r", "on", 7.0, 0.25)
        on["params"]["lms"] = LMS_EVERYTHING
        records.append(on)
    linked = record("alpha", "r", "link", 5.0, 0.25)
    linked["params"]["lms"] = LMS_EVERYTHING | {"link": {"bandwidth": 2e9, "latency": 0.0}}
    records.append(linked)
    figure, axis = draw_throughput(throughput_bars(_group(list(map(trial, records)))))
    handles, _ = axis.get_legend_handles_labels()
    labels = [text.get_text().replace("\n", " ") for text in axis.get_legend().get_texts()]
    assert labels[0] == "LMS off" and len(labels) == len(set(labels)) == 3  # one per setting
    assert all(label.startswith("LMS on (swapout_threshold 1") for label in labels[1:])
    assert "2 GB/s" in labels[2]
    looks = {(tuple(h.patches[0].get_facecolor()), h.patches[0].get_hatch()) for h in handles}
    assert len(looks) == 3  # every setting its own colour and hatch
    # no two bars stand in the same place: off and on are beside each other per host
    bars = [(p.get_x(), p.get_height()) for h in handles for p in h.patches]
    assert len(bars) == 5 and len({x for x, _ in bars}) == 5
    assert sorted(h for _, h in bars) == [5.0, 7.0, 7.0, 10.0, 10.0]
    assert all(h.errorbar is not None for h in handles)  # the standard errors stay
    ticks = [t.get_text() for t in axis.get_xticklabels()]
    assert ticks == ["googlenet\n64px b2 fp32\nalpha", "googlenet\n64px b2 fp32\nbeta"]
    discard(figure)
