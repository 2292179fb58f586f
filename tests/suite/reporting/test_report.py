"""Reports render from stored records only: hand-made records with known numbers."""

import copy
import json
import re

from report_cases import HOST, record, write_record

from suite.records import host_ref, results_file, store_host
from suite.reporting.report import render_report


def test_report_tables_numbers_hosts_and_plot(tmp_path):
    other = copy.deepcopy(HOST)
    other.update(architecture="ppc64le", tensorflow_version="2.14.1")
    ref_a, ref_b = store_host(tmp_path, HOST), store_host(tmp_path, other)
    write_record(tmp_path, record("alpha", ref_a, "aaaa", 12.5, 0.25))
    write_record(tmp_path, record("beta", ref_b, "aaaa", 30.0, 0.5))
    swapping = record("beta", ref_b, "aaaa", 32.0, 0.5, repeat=1)
    swapping["metrics"]["lms_traffic"] = {
        "source": "host-store",
        "steps": 5,
        "swap_outs_per_step": 143,
        "swap_ins_per_step": 194,
        "out_bytes_per_step": 131 * 2**20,
        "in_bytes_per_step": 189 * 2**20,
        "out_seconds_per_step": 131 * 2**20 / 2e9,
        "in_seconds_per_step": 189 * 2**20 / 1e9,
        "out_bandwidth": 2e9,
        "in_bandwidth": 1e9,
        "link": {"bandwidth": 2e9, "latency": 0.0},
    }
    write_record(tmp_path, swapping)
    write_record(
        tmp_path,
        record("beta", ref_b, "bbbb", 0, 0, resolution=96, outcome="crashed"),
    )
    path = render_report(tmp_path, tmp_path / "out")
    text = path.read_text()
    assert "Generated" in text and "4 records" in text
    assert "Spec hash `aaaa`" in text and "Spec hash `bbbb`" in text
    assert "| alpha  | 1 ok" in text and "12.5 ± 0.25" in text
    assert "31 ± 1" in text  # two repeats: mean 31, stderr across repeats 1
    assert "0.0512 ± 0.001" in text  # 12.5 images/s x 64^2 pixels in Mpixels/s
    assert "1 crashed" in text
    assert "300 MiB" in text
    assert "ppc64le" in text and "2.14.1 / 3.15.1" in text
    assert "| copy GB/s at 1 MiB / 64 MiB / 1 GiB | memcpy 40 / 12 / 10" in text
    # swap traffic beside throughput: per step, both ways; this record is from before traffic
    # version 2, whose seconds timed the swap ops' bookkeeping: no bandwidth from them
    assert "swapped per step (out / in)" in text
    assert (
        "131 MiB / 189 MiB (143 / 194 swaps; bandwidth not measured (record before swap "
        "traffic v2))" in text
    )
    assert "GB/s)" not in text
    png = (tmp_path / "out" / "throughput.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 5000
    assert (
        "![Training throughput per configuration and host, LMS off and on](throughput.png)" in text
    )


def test_report_without_records_says_so(tmp_path):
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "No records yet" in text


def test_comparison_ratios_flags_and_what_is_left_out(tmp_path):
    other = copy.deepcopy(HOST)
    other.update(tensorflow_version="2.14.1", keras_version="2.14.0")
    ref_a, ref_b = store_host(tmp_path, HOST), store_host(tmp_path, other)

    def on(workload, host, ref, spec_hash, rate, resolution=64):
        made = record(host, ref, spec_hash, rate, 0.1, resolution)
        made["params"]["workload"] = workload
        write_record(tmp_path, made)

    for host, ref, rate in (("alpha", ref_a, 10.0), ("beta", ref_b, 25.0)):
        on("googlenet", host, ref, "same1", rate)
        on("resnet50", host, ref, "same2", rate * 2, 96)
    # the same workload with other parameters on each host: different hashes, never compared
    on("deeplabv3plus", "alpha", ref_a, "lonely", 5.0, 128)
    on("deeplabv3plus", "beta", ref_b, "other", 6.0, 160)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    details = text[text.index("## Details per configuration") :]
    assert details.count("| vs alpha ") == 2  # the two shared hashes get a ratio column
    # one process per host: a ratio, but no uncertainty to claim a difference with
    assert "| beta   | 1 ok       | 25 ± 0.1 (steps of 1 process) | 2.50× (1 process: no" in text
    assert "| alpha  | 1 ok       | 10 ± 0.1 (steps of 1 process) | reference" in text
    assert "| alpha  | 1 ok       | 20 ± 0.1 (steps of 1 process) | reference" in text
    assert "| beta   | 1 ok       | 50 ± 0.1 (steps of 1 process) | 2.50× (1 process: no" in text
    assert "`lonely` (deeplabv3plus): recorded on alpha only" in text
    assert "`other` (deeplabv3plus): recorded on beta only" in text
    assert "**TensorFlow / Keras** ⚠ differs" in text and "**CPU** ⚠" not in text
    assert "## Provenance" in text and "`same1`" in text


def test_lms_trials_get_a_simulated_memory_timeline(tmp_path):
    ref = store_host(tmp_path, HOST)
    with_lms = record("alpha", ref, "lmson", 3.0, 0.1)
    with_lms["params"]["lms"] = {"swapout_threshold": -1}
    with_lms["metrics"]["lms"] = {
        "budget_bytes": 2**30,
        "timeline": {
            "device_bytes_without_lms": [2**29, 2**31, 2**29],
            "device_bytes_with_lms": [2**29, 2**30 - 1, 2**29],
            "host_bytes": [0, 2**30, 0],
        },
    }
    write_record(tmp_path, with_lms)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "## Simulated memory with LMS" in text and "(memory-lmson.png)" in text
    assert (tmp_path / "out" / "memory-lmson.png").read_bytes()[:4] == b"\x89PNG"


def test_an_emulated_host_is_flagged_wherever_its_rates_appear(tmp_path):
    emulated = copy.deepcopy(HOST)
    emulated.update(
        architecture="aarch64",
        emulation="qemu-user: aarch64 on an x86_64 kernel",
        cpu_kernels="Eigen",
    )
    native = {**HOST, "cpu_kernels": "oneDNN"}
    refs = {"local": store_host(tmp_path, native), "local-arm64": store_host(tmp_path, emulated)}
    for host, rate in (("local", 20.0), ("local-arm64", 0.5)):
        for repeat in range(2):
            made = record(host, refs[host], "same", rate + repeat * 0.1, 0.1, repeat=repeat)
            write_record(tmp_path, made)
    # a size only the native host trained (seen: the aarch64 image peaks higher under a budget)
    for host, outcome in (("local", "ok"), ("local-arm64", "out_of_memory")):
        made = record(host, refs[host], "bigger", 15.0, 0.1, resolution=96, outcome=outcome)
        write_record(tmp_path, made)
    # ... and one at the edge: one process of two trained
    for repeat, outcome in enumerate(("out_of_memory", "ok")):
        made = record("local-arm64", refs["local-arm64"], "edge", 0.25, 0.01, 128, outcome, repeat)
        write_record(tmp_path, made)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "| 0.25 ± 0.01 (steps of 1 process; 1 of 2: out of memory) |" in text
    bigger = text[text.index("## googlenet — 96px") :]
    row = r"\| local-arm64 ⚠ emulated \| 1 out_of_memory \| out of memory\s*\| —"
    assert re.search(row, bigger)
    head = text[: text.index("## The answer")]
    assert "⚠ **local-arm64 is emulated** (qemu-user: aarch64 on an x86_64 kernel)" in head
    assert "**local is emulated**" not in text
    answer = text[text.index("## The answer") : text.index("## Details per configuration")]
    details = text[text.index("## Details per configuration") : text.index("## Hosts")]
    for table in (answer, details):
        assert "| local-arm64 ⚠ emulated |" in table and "| local " in table
    assert re.search(r"\*\*emulation\*\* ⚠ differs\s*\| native\s*\| qemu-user: aarch64", text)
    assert re.search(r"\*\*CPU kernels\*\* ⚠ differs\s*\| oneDNN\s*\| Eigen", text)


def test_a_record_missing_a_metric_renders_with_a_dash(tmp_path, caplog):
    """A trained record without the workload's pixel rate or a peak: "—" in those cells. One
    without images/sec cannot be shown: it does not load (a warning names its line), and the
    report renders the rest (it was a KeyError in answer.py)."""
    ref = store_host(tmp_path, HOST)
    sparse = record("alpha", ref, "aaaa", 12.5, 0.25)
    del sparse["metrics"]["pixels_per_sec"], sparse["metrics"]["peak_memory_bytes"]
    write_record(tmp_path, sparse)
    rateless = record("alpha", ref, "aaaa", 99.0, 0.5, repeat=1)
    del rateless["metrics"]["images_per_sec"]
    with open(results_file(tmp_path, "alpha"), "a") as handle:  # as an older suite wrote it
        handle.write(json.dumps(rateless | {"schema": 1}) + "\n")
    text = render_report(tmp_path, tmp_path / "out").read_text()
    details = text[text.index("## Details per configuration") :]
    (row,) = [line for line in details.splitlines() if line.startswith("| alpha")]
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[:5] == ["alpha", "1 ok", "12.5 ± 0.25 (steps of 1 process)", "—", "—"]
    assert "99 ±" not in text
    assert "alpha.jsonl:2" in caplog.text and "images_per_sec" in caplog.text


def test_a_host_description_missing_a_field_renders_with_a_gap(tmp_path, caplog):
    """An older capture without the fields later suites added shows "—" (unknown) in their
    rows; one without what every description has (its CPU) says its description is missing
    and why in a warning, and the rest renders (it was a KeyError 'cpu' in report.py)."""
    old = {key: HOST[key] for key in ("architecture", "cpu", "memory_bytes")}
    old["cpu"] = {"model": None, "sockets": None, "cores": 4, "threads": None}
    cpuless = {key: HOST[key] for key in ("architecture", "memory_bytes", "tensorflow_version")}
    for host, description in (("old", old), ("cpuless", cpuless)):
        ref = host_ref(description)
        (tmp_path / "hosts").mkdir(exist_ok=True)
        (tmp_path / "hosts" / f"{ref}.json").write_text(json.dumps(description))
        write_record(tmp_path, record(host, ref, "aaaa", 10.0, 0.1))
    text = render_report(tmp_path, tmp_path / "out").read_text()
    rows = [line.split("|") for line in text[text.index("## Hosts") :].splitlines()]
    hosts = {
        cells[1].replace("⚠ differs", "").strip(" *"): [c.strip() for c in cells[2:-1]]
        for cells in rows
        if len(cells) > 3
    }
    assert hosts["CPU"] == ["description missing", "—"]
    assert hosts["sockets / cores / threads"] == ["description missing", "— / 4 / —"]
    assert hosts["GPUs"][1] == "unknown" and hosts["Python"][1] == "—"
    assert hosts["copy GB/s at 1 MiB / 64 MiB / 1 GiB"][1] == "—"
    assert hosts["suite commit"][1] == "unknown"
    assert "skipping a host description" in caplog.text and "'cpu'" in caplog.text
