"""Reports render from stored records only: hand-made records with known numbers."""

import copy
import re

from suite.records import (
    SCHEMA_VERSION,
    append_record,
    results_file,
    store_host,
    validate_search_record,
)
from suite.reporting.report import render_report

HOST = {
    "architecture": "x86_64",
    "cpu": {"model": "Test CPU", "sockets": 1, "cores": 2, "threads": 4},
    "memory_bytes": 2**34,
    "gpus": [],
    "driver_version": None,
    "cuda_version": None,
    "cudnn_version": None,
    "tensorflow_version": "2.21.0",
    "keras_version": "3.15.1",
    "python_version": "3.11.7",
    "image_digest": None,
    "suite": {"commit": "abcdef1234567890", "dirty": False},
    "link": {
        "sizes_bytes": [2**20, 2**23, 2**26, 2**28, 2**30],
        "memcpy_gbps": [40.0, 30.0, 12.0, 11.0, 10.0],
        "gpus": [],
    },
}


def record(host, ref, spec_hash, mean, stderr, resolution=64, outcome="ok", repeat=0):
    metrics = None
    if outcome == "ok":
        metrics = {
            "images_per_sec": {"mean": mean, "stderr": stderr, "jitter": 0.0, "total": mean},
            "pixels_per_sec": {
                "mean": mean * resolution**2,
                "stderr": stderr * resolution**2,
                "jitter": 0.0,
                "total": 0.0,
            },
            "peak_memory_bytes": 300 * 2**20,
        }
    return {
        "schema": SCHEMA_VERSION,
        "spec": {"name": "s", "study": "a", "source": "s.toml"},
        "spec_hash": spec_hash,
        "params": {
            "workload": "googlenet",
            "resolution": resolution,
            "batch": 2,
            "precision": "fp32",
            "classes": 1001,
            "steps": 5,
            "warmup_steps": 1,
            "data": {"kind": "synthetic"},
            "memory_budget_bytes": None,
            "seed": 0,
        },
        "repeat": repeat,
        "host": host,
        "host_ref": ref,
        "outcome": outcome,
        "metrics": metrics,
        "error": None if outcome == "ok" else "boom",
        "device": "CPU:0",
        "started_at": "2026-11-01T00:00:00+00:00",
        "finished_at": "2026-11-01T00:01:00+00:00",
        "wall_s": 60.0,
    }


def test_report_tables_numbers_hosts_and_plot(tmp_path):
    other = copy.deepcopy(HOST)
    other.update(architecture="ppc64le", tensorflow_version="2.14.1")
    ref_a, ref_b = store_host(tmp_path, HOST), store_host(tmp_path, other)
    append_record(results_file(tmp_path, "alpha"), record("alpha", ref_a, "aaaa", 12.5, 0.25))
    append_record(results_file(tmp_path, "beta"), record("beta", ref_b, "aaaa", 30.0, 0.5))
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
    append_record(results_file(tmp_path, "beta"), swapping)
    append_record(
        results_file(tmp_path, "beta"),
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
        append_record(results_file(tmp_path, host), made)

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
    append_record(results_file(tmp_path, "alpha"), with_lms)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "## Simulated memory with LMS" in text and "(memory-lmson.png)" in text
    assert (tmp_path / "out" / "memory-lmson.png").read_bytes()[:4] == b"\x89PNG"


LMS_EVERYTHING = {"swapout_threshold": 1, "swapin_ahead": 1, "swapin_groupby": 0, "sync_mode": 0,
                  "serialization": [], "serialization_by_size": 0.0, "device_memory": None,
                  "safety_ratio": 0.8}  # fmt: skip


def search_record(host, ref, kind, mode, largest, smallest):
    searched = "resolution" if kind == "max-resolution" else "batch"
    params = record(host, ref, "x", 1.0, 0.0)["params"]
    params[searched] = None
    params["memory_budget_bytes"] = 300 * 2**20
    return {
        "schema": SCHEMA_VERSION, "kind": kind, "search_hash": f"{kind}-{mode}-{host}",
        "limit_key": kind, "mode": mode, "spec": {"name": "s", "study": kind, "source": "s"},
        "params": params, "lms": LMS_EVERYTHING if mode == "on" else None, "searched": searched,
        "range": [32, 1024, 32], "largest_ok": largest, "smallest_failed": smallest,
        "failed_outcome": "out_of_memory", "stop_reached": False, "trials": [], "trials_run": 0,
        "prediction": {}, "host": host, "host_ref": ref, "started_at": "2026-11-01T00:00:00+00:00",
        "finished_at": "2026-11-01T00:10:00+00:00",
    }  # fmt: skip


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
        path = results_file(tmp_path, host)
        for repeat in range(3):
            append_record(path, record(host, refs[host], "off1", off * spread[repeat], 0.1,
                                       repeat=repeat))  # fmt: skip
            lms = record(host, refs[host], "on1", on * on_spread[repeat], 0.1, repeat=repeat)
            lms["params"]["lms"] = LMS_EVERYTHING
            append_record(path, lms)
        searches = tmp_path / "searches" / f"{host}.jsonl"
        for kind, mode, largest in (("max-resolution", "off", 416), ("max-resolution", "on", 832),
                                    ("max-batch", "off", 4), ("max-batch", "on", 12)):  # fmt: skip
            append_record(searches, search_record(host, refs[host], kind, mode, largest, None),
                          validate_search_record)  # fmt: skip
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


def test_replicas_get_a_scaling_table_with_efficiency_against_one_replica(tmp_path):
    ref = store_host(tmp_path, HOST)
    path = results_file(tmp_path, "alpha")
    for repeat, (one, two) in enumerate([(10.0, 18.0), (10.5, 19.0), (9.5, 17.0)]):
        append_record(path, record("alpha", ref, "one", one, 0.1, repeat=repeat))
        pair = record("alpha", ref, "two", two, 0.1, repeat=repeat)
        pair["params"]["gpus"] = 2  # 2 replicas of the same per-replica batch
        append_record(path, pair)
    text = render_report(tmp_path, tmp_path / "out").read_text()
    assert "## Scaling: replicas" in text
    table = text[text.index("## Scaling") :]
    assert (
        "| googlenet 64px b2/replica fp32 | alpha  | 1          | 10 ± 0.29 (3 processes) | 10 "
        in table
    )
    # 18, 19, 17 against 2 x (10, 10.5, 9.5): 90 % of ideal, interval from the six processes
    row = next(line for line in table.splitlines() if "| 2 " in line)
    assert "9 " in row and "90% (" in row
    assert (tmp_path / "out" / "scaling.png").read_bytes().startswith(b"\x89PNG")


def test_an_emulated_host_is_flagged_wherever_its_rates_appear(tmp_path):
    emulated = copy.deepcopy(HOST)
    emulated.update(architecture="aarch64", emulation="qemu-user: aarch64 on an x86_64 kernel",
                    cpu_kernels="Eigen")  # fmt: skip
    native = {**HOST, "cpu_kernels": "oneDNN"}
    refs = {"local": store_host(tmp_path, native), "local-arm64": store_host(tmp_path, emulated)}
    for host, rate in (("local", 20.0), ("local-arm64", 0.5)):
        for repeat in range(2):
            made = record(host, refs[host], "same", rate + repeat * 0.1, 0.1, repeat=repeat)
            append_record(results_file(tmp_path, host), made)
    # a size only the native host trained (seen: the aarch64 image peaks higher under a budget)
    for host, outcome in (("local", "ok"), ("local-arm64", "out_of_memory")):
        made = record(host, refs[host], "bigger", 15.0, 0.1, resolution=96, outcome=outcome)
        append_record(results_file(tmp_path, host), made)
    # ... and one at the edge: one process of two trained
    for repeat, outcome in enumerate(("out_of_memory", "ok")):
        made = record("local-arm64", refs["local-arm64"], "edge", 0.25, 0.01, 128, outcome, repeat)
        append_record(results_file(tmp_path, "local-arm64"), made)
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


MIB = 2**20


def lms_report(variable_bytes, input_bytes, op, op_bytes, budget=300 * MIB):
    """An LMS report as `lms.api.build_report` writes it into a trial's metrics (no timeline)."""
    return {
        "budget_bytes": budget, "planned_budget_bytes": budget, "fits": True, "lms_needed": True,
        "parameters": LMS_EVERYTHING, "peak_bytes_without_lms": 2 * budget,
        "peak_op_without_lms": "googlenet_1/conv2_1/Relu", "peak_bytes_with_lms": budget - MIB,
        "peak_op_with_lms": op, "host_peak_bytes": budget, "swapped_tensors": 40, "swap_ins": 52,
        "swapped_bytes": budget, "swapped_in_bytes": budget, "simulations": 9,
        "peak": {"step": 0, "steps": 0, "buffers": []},
        "analysis": {
            "vertices": 2559, "edges": 4677, "levels": 161, "learning_parameter_bytes": 28 * MIB,
            "variable_bytes": variable_bytes, "input_bytes": input_bytes,
            "largest_op": {"name": op, "bytes": op_bytes}, "unknown_size_tensors": 0,
            "kernels": "onednn",
        },
        "timings_s": {"analysis": 1.0, "tuning": 2.0, "rewrite": 0.5},
    }  # fmt: skip


RELU_GRAD = "gradient_tape/googlenet_1/conv1_1/ReluGrad"
POOL_GRAD = "gradient_tape/googlenet_1/pool1_1/MaxPool2d/MaxPoolGrad"


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
                    trial["params"].update({searched: value, "lms": LMS_EVERYTHING,
                                            "memory_budget_bytes": 300 * MIB})  # fmt: skip
                    if report is not None:
                        trial["metrics"] = {**(trial["metrics"] or {}), "lms": report}
                    append_record(results_file(tmp_path, host), trial)
                    made["trials"].append({"value": value, "spec_hash": spec_hash,
                                           "outcome": outcome, "reused": False,
                                           "peak_memory_bytes": None,
                                           "images_per_sec": 2.0})  # fmt: skip
            append_record(tmp_path / "searches" / f"{host}.jsonl", made, validate_search_record)

    oom = "out_of_memory"
    relu = lms_report(60 * MIB, 6 * MIB, RELU_GRAD, 74 * MIB)
    pool = lms_report(60 * MIB, 2 * MIB, POOL_GRAD, 78 * MIB)
    # with the closed loop the bound is the device LMS was given (380 MiB), not its budget (300)
    pool["calibration"] = {"limit_bytes": 300 * MIB, "device_limit_bytes": 380 * MIB,
                           "accepted": True, "corrections": 0, "attempts": []}  # fmt: skip
    smaller = lms_report(60 * MIB, 4 * MIB, "googlenet_1/conv3_1/Relu", 50 * MIB)
    larger = lms_report(60 * MIB, 8 * MIB, "googlenet_1/conv3_1/Relu", 99 * MIB)
    # the trial at the limit sets the bound, not a smaller or a larger one
    search("alpha", "max-resolution", 160, 256, [(208, "ok", smaller), (256, "ok", relu),
                                                 (304, oom, larger)])  # fmt: skip
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
        "2.56× pixels", "≈ 7.68× (443), set by conv1_1/ReluGrad"]  # fmt: skip
    assert cells[("alpha", "max batch")] == [
        "3.00× batch", "≈ 12.00× (48), set by pool1_1/MaxPool2d/MaxPoolGrad"]  # fmt: skip
    assert cells[("beta", "max resolution")] == ["2.56× pixels", "—"]
    assert cells[("beta", "max batch")] == ["—", "—"]
    assert cells[("gamma", "max resolution")] == ["only with LMS", "≈ 527, set by conv1_1/ReluGrad"]
    assert cells[("gamma", "max batch")] == ["—", "—"]
    bounded_by_pool = "≈ 5.12× (362), set by pool1_1/MaxPool2d/MaxPoolGrad"
    assert cells[("delta", "max resolution")] == ["2.56× pixels", bounded_by_pool]


def traffic(copy, out_seconds=None, in_seconds=None):
    """An LMS record's swap traffic (version 2): 131 MiB out, 189 MiB in per step."""
    out_bytes, in_bytes = 131 * 2**20, 189 * 2**20
    return {
        "version": 2, "source": "host-store", "copy": copy, "steps": 5,
        "swap_outs_per_step": 143, "swap_ins_per_step": 194,
        "out_bytes_per_step": out_bytes, "in_bytes_per_step": in_bytes,
        "out_seconds_per_step": out_seconds, "in_seconds_per_step": in_seconds,
        "out_bandwidth": out_bytes / out_seconds if out_seconds else None,
        "in_bandwidth": in_bytes / in_seconds if in_seconds else None,
        "link": {"bandwidth": 2e9, "latency": 0.0} if copy == "emulated link" else None,
    }  # fmt: skip


def test_swap_bandwidth_is_shown_only_where_a_copy_was_timed(tmp_path):
    """An emulated link's transfers give a bandwidth (bytes over all processes' seconds); the
    emulated device without a link says there was no copy; an old record's bookkeeping
    "bandwidth" is not shown; a GPU step nobody profiled says so."""
    ref = store_host(tmp_path, HOST)
    path = results_file(tmp_path, "alpha")
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
            append_record(path, made)
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
    figure, axis = draw_throughput(throughput_bars(_group(records)))
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


def test_a_measurement_on_a_busy_machine_is_flagged_wherever_its_rate_appears(tmp_path):
    """Three processes of one configuration, one measured while other processes held 1.2 of 2
    cores: the answer and the configuration's table say so; quiet and older records do not."""
    ref = store_host(tmp_path, HOST)
    path = results_file(tmp_path, "h1")
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
        append_record(path, made)
    append_record(results_file(tmp_path, "h2"), record("h2", ref, "aaa", 9.0, 0.1))
    text = render_report(tmp_path, tmp_path / "out").read_text()
    flag = "⚠ 1 on a busy machine (others used 1.2 of 2 cores)"
    answer = text[text.index("## The answer") : text.index("## Details per configuration")]
    details = text[text.index("## Details per configuration") :]
    for part in (answer, details):
        (h1,) = [line for line in part.splitlines() if line.startswith("| h1 ")]
        (h2,) = [line for line in part.splitlines() if line.startswith("| h2 ")]
        assert flag in h1 and "busy" not in h2
    assert '"⚠ k on a busy machine": k of the processes' in " ".join(answer.split())
