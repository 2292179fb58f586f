"""The scaling section: replicas against one replica of the same configuration, one row per
layout (nodes x GPUs per node)."""

from report_cases import HOST, record, write_record

from suite.records import store_host
from suite.reporting.report import render_report


def test_replicas_get_a_scaling_table_with_efficiency_against_one_replica(tmp_path):
    ref = store_host(tmp_path, HOST)
    for repeat, (one, two) in enumerate([(10.0, 18.0), (10.5, 19.0), (9.5, 17.0)]):
        write_record(tmp_path, record("alpha", ref, "one", one, 0.1, repeat=repeat))
        pair = record("alpha", ref, "two", two, 0.1, repeat=repeat)
        pair["params"]["gpus"] = 2  # 2 replicas of the same per-replica batch
        write_record(tmp_path, pair)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "## Scaling: replicas" in text
    table = text[text.index("## Scaling") :]
    assert (
        "| googlenet 64px b2/replica fp32 | alpha  | 1 × 1                   | 1          "
        "| 10 ± 0.29 (3 processes) | 10 " in table
    )
    # 18, 19, 17 against 2 x (10, 10.5, 9.5): 90 % of ideal, interval from the six processes
    row = next(line for line in table.splitlines() if "| 1 × 2 " in line)
    assert "| 2 " in row and "9 " in row and "90% (" in row
    assert (tmp_path / "out" / "scaling.png").read_bytes().startswith(b"\x89PNG")


def test_two_nodes_and_two_gpus_on_one_node_are_rows_of_their_own(tmp_path):
    ref = store_host(tmp_path, HOST)
    for repeat, (one, packed, spread) in enumerate([(10.0, 19.0, 15.0), (10.0, 19.0, 15.0)]):
        write_record(tmp_path, record("alpha", ref, "one", one, 0.1, repeat=repeat))
        for name, rate, layout in (("packed", packed, (1, 2)), ("spread", spread, (2, 1))):
            pair = record("alpha", ref, name, rate, 0.1, repeat=repeat)
            pair["params"]["nodes"], pair["params"]["gpus"] = layout
            write_record(tmp_path, pair)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    table = text[text.index("## Scaling") :].split("\n\n")[2]
    rows = [line for line in table.splitlines() if line.startswith("| googlenet")]
    assert [row.split("|")[3].strip() for row in rows] == ["1 × 1", "1 × 2", "2 × 1"]
    assert "95%" in rows[1] and "75%" in rows[2]  # 19 and 15 against 2 x 10
    assert (tmp_path / "out" / "scaling.png").read_bytes().startswith(b"\x89PNG")
