"""The invoke tasks as a user calls them: real subprocesses."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _unwritable import unwritable
from report_cases import HOST, record, write_record
from tiny_specs import TINY as ONE_TRIAL

from suite.records import results_file, store_host

ROOT = Path(__file__).resolve().parents[2]
TINY = """name = "tiny"
[defaults]
steps = 2
warmup_steps = 1
repeats = 2
timeout = 600

[[study]]
name = "tiny"
kind = "throughput"
lms_mode = "both"
workload = "googlenet"
resolution = 64
batch = 1
memory_budget = "300MiB"
lms = { swapout_threshold = 1, swapin_ahead = 1, swapin_groupby = 0, sync_mode = 0 }
"""


def inv(*args, timeout=300):
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_list_explains_every_task():
    listing = inv("--list").stdout
    for name in ("run", "report", "models", "hostinfo", "test", "specs"):
        assert f"  {name} " in listing


def test_user_error_is_one_line_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text(
        'name = "bad"\n[[study]]\nname = "x"\nkind = "throughput"\n'
        'workload = "googlenet"\nresolution = 64\nbatch = -1\n'
    )
    completed = inv("run", "--spec", str(bad), "--results", str(tmp_path))
    assert completed.returncode == 2
    assert "Traceback" not in completed.stderr
    assert completed.stderr.strip() == (
        f"error: {bad}: field 'study[0].batch' = -1 is invalid; allowed: an integer >= 1"
    )


def test_an_override_that_is_not_a_number_is_one_line(tmp_path):
    completed = inv("run", "--batch", "abc", "--results", str(tmp_path))
    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        "error: command line: field '--batch' = 'abc' is invalid; allowed: an integer >= 1"
    )


def test_models_prints_counts_and_largest_activation():
    completed = inv("models", "--workload", "resnet50", "--resolution", "224")
    assert completed.returncode == 0, completed.stderr
    assert "25,636,712" in completed.stdout and "resnet50" in completed.stdout


def test_hostinfo_prints_json_description():
    import tensorflow as tf

    completed = inv("hostinfo")
    description = json.loads(completed.stdout)
    assert description["architecture"] and description["tensorflow_version"] == tf.__version__
    # what TensorFlow sees here: no GPU on a CPU machine, every GPU on a GPU host
    assert len(description["gpus"]) == len(tf.config.list_physical_devices("GPU"))
    assert (description["cuda_version"] is None) == (not tf.test.is_built_with_cuda())
    # the link: copy bandwidth from 1 MiB to 1 GiB, host memory and each GPU's copies
    link = description["link"]
    assert link["sizes_bytes"][0] == 2**20 and link["sizes_bytes"][-1] == 2**30
    assert len(link["memcpy_gbps"]) == len(link["sizes_bytes"])
    assert all(rate > 0 for rate in link["memcpy_gbps"])
    assert len(link["gpus"]) == len(description["gpus"])


def test_specs_lists_every_shipped_spec_with_its_studies():
    from suite.specs import available_specs, load_spec

    lines = inv("specs").stdout.splitlines()
    heads = [line for line in lines if line and not line.startswith("  ")]
    assert len(heads) == len(available_specs())
    for name, line in zip(available_specs(), heads, strict=True):
        spec = load_spec(name)
        # the trials `inv run` counts: every configuration times its repeats
        processes = sum(t.repeats for t in spec.trials)
        trials = f"{processes} trial{'' if processes == 1 else 's'} ("
        assert line.startswith(f"{name}: {trials}" if processes else f"{name}: ")
        # the whole description, re-flowed: not cut mid-sentence
        start = lines.index(line) + 1
        text = []
        for following in lines[start:]:
            if not following.startswith("    "):
                break
            text.append(following.strip())
        assert " ".join(text) == " ".join(spec.description.split())
        assert all(len(part) <= 100 for part in lines[start : start + len(text)])
    assert (
        "smoke: 12 trials (4 configurations x 3 repeats), 4 limit searches (2 studies x LMS "
        in ("\n".join(lines))
    )
    assert any(
        line.startswith(
            "resnet50-sweep: 8 trials in 1 switch sweep (8 resolutions x 1 "
            "repeat, +1 where LMS becomes necessary), 2 limit searches"
        )
        for line in lines
    )
    # which studies use LMS, and how
    assert "  lms-everything: googlenet 2240px batch 15 fp16 — LMS on (swapout_threshold 1, " in (
        "\n".join(lines)
    )
    assert "  lms-auto: googlenet 2240px batch 15 fp16 — LMS on (auto-tuned)" in lines
    assert any(
        line.startswith("  sweep: resnet50 500-4000px batch 1 fp32 — LMS off, then on")
        for line in lines
    )
    assert any(" — LMS off and on (auto-tuned)" in line for line in lines)


def test_plan_prints_the_plan_and_plots_it_without_training(tmp_path):
    completed = inv(
        "plan",
        "--spec",
        "smoke",
        "--workload",
        "googlenet",
        "--resolution",
        "96",
        "--device-memory",
        "100MiB",
        "--output",
        str(tmp_path),
    )
    assert completed.returncode == 0, completed.stderr
    # smoke's GoogLeNet throughput study: LMS off (planned auto-tuned: what LMS would do) and on
    # (TFLMSv2's everything swapped, as written in the spec)
    report, swap_all = json.loads(completed.stdout)  # stdout is the JSON alone
    assert swap_all["parameters"]["swapout_threshold"] == 1 and swap_all["swapped_bytes"] > 0
    assert (report["workload"], report["resolution"], report["batch"]) == ("googlenet", 96, 4)
    assert report["lms_needed"] and report["fits"] and report["swapped_bytes"] > 0
    assert (
        report["peak_bytes_with_lms"] <= report["budget_bytes"] < report["peak_bytes_without_lms"]
    )
    assert "The largest operation is" in completed.stderr  # TFLMSv2's log messages
    peak = report["peak"]  # what holds the planned peak, and why it was not swapped
    assert peak["running_op"] == report["peak_op_with_lms"]
    parts = ("resident_bytes", "buffer_bytes", "kernel_temporary_bytes")
    parts += ("next_op_in_flight_bytes", "allocator_padding_bytes")
    assert sum(peak[p] for p in parts) == report["peak_bytes_with_lms"]
    assert all(b["why_on_device"] and b["bytes"] > 0 for b in peak["largest_buffers"])
    assert Path(report["plot"]).read_bytes().startswith(b"\x89PNG")
    # one plot per plan, named for which: LMS off and LMS on do not overwrite each other
    assert (report["study"], report["trial_lms"], swap_all["trial_lms"][:3]) == (
        "googlenet-throughput",
        "off",
        "on ",
    )
    assert (
        Path(report["plot"]).name == "plan-smoke-googlenet-throughput-googlenet-96px-b4-lms-off.png"
    )
    assert (
        Path(swap_all["plot"]).name
        == "plan-smoke-googlenet-throughput-googlenet-96px-b4-lms-on.png"
    )
    assert sorted(p.name for p in tmp_path.glob("*.png")) == sorted(
        Path(r["plot"]).name for r in (report, swap_all)
    )
    assert Path(report["plot"]).read_bytes() != Path(swap_all["plot"]).read_bytes()
    wrong = inv("plan", "--workload", "nope", "--device-memory", "1GiB")
    assert wrong.returncode == 2 and "it has: deeplabv3plus, googlenet" in wrong.stderr
    wrong = inv("plan", "--workload", "googlenet", "--device-memory", "lots")
    last_line = wrong.stderr.strip().splitlines()[-1]  # after TensorFlow's start-up noise
    assert wrong.returncode == 2 and last_line.startswith("error: --device-memory 'lots': a size")


def test_project_prints_throughput_per_link_and_the_report_plots_it(tmp_path):
    common = [
        "--spec",
        "smoke",
        "--workload",
        "googlenet",
        "--resolution",
        "64",
        "--batch",
        "2",
        "--output",
        str(tmp_path),
    ]
    roofline = inv("project", *common, "--gpu", "v100", "--link", "pcie3,nvlink2")
    assert roofline.returncode == 0, roofline.stderr
    (estimate,) = json.loads(roofline.stdout)  # stdout is the JSON alone: progress on stderr
    progress = "[1/1] googlenet 64px batch 2 fp32 on v100"  # among TensorFlow's messages
    assert any(line.startswith(progress) for line in roofline.stderr.splitlines())
    assert (estimate["gpu"], estimate["resolution"], estimate["batch"]) == ("v100", 64, 2)
    pcie3, nvlink2 = estimate["links"]
    assert estimate["in_bytes_per_step"] > 0 and estimate["swaps"] > 0
    # the same swaps over a 4.7x faster link: never slower, never above the compute-bound rate
    assert pcie3["images_per_sec"] <= nvlink2["images_per_sec"]
    assert nvlink2["images_per_sec"] <= estimate["images_per_sec_without_link_waits"] * 1.000001
    measured = inv("project", *common, "--link", "pcie3,0.5GB/s")  # --gpu host: profiled here
    assert measured.returncode == 0, measured.stderr
    stored = json.loads((tmp_path / "projection.json").read_text())
    assert stored["schema"] == 2  # the projection record is versioned
    (here,) = stored["projections"]
    assert json.loads(measured.stdout) == [here]
    assert here["gpu"] == "host" and here["links"][0]["step_seconds"] >= here["compute_seconds"]
    assert here["links"][1]["bandwidth"] == 0.5e9  # any bandwidth, beside the named links
    results = tmp_path / "results"
    results.mkdir()
    assert inv("report", "--results", str(results), "--output", str(tmp_path)).returncode == 0
    report = (tmp_path / "report.md").read_text()
    assert "## Projected throughput per link" in report and "PCIe 3.0 x16" in report
    assert "0.5 GB/s per direction" in report
    assert (tmp_path / "projection.png").read_bytes().startswith(b"\x89PNG")
    import tensorflow as tf

    if not tf.config.list_physical_devices("GPU"):  # a seed's GPU size is not profiled on a CPU
        seed = inv("project", "--spec", "googlenet-enlarged", "--output", str(tmp_path))
        assert seed.returncode == 2 and "is sized for a GPU" in seed.stderr.splitlines()[-1]
    wrong = inv("project", *common, "--link", "usb2")
    assert wrong.returncode == 2 and "allowed: nvlink2, pcie3" in wrong.stderr.splitlines()[-1]


def test_a_virtualenv_left_broken_by_a_failed_setup_is_made_again(tmp_path):
    """The first `./inv` creates .venv; one interrupted there (a python without pip) must not
    stay broken. Without an index the install then fails, and leaves no stamp to skip it."""
    broken = tmp_path / "venv"
    (broken / "bin").mkdir(parents=True)
    (broken / "bin" / "python").write_text("#!/bin/sh\nexit 1\n")
    (broken / "bin" / "python").chmod(0o755)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(tmp_path)}
    completed = subprocess.run(
        ["bash", str(ROOT / "scripts" / "venv.sh"), str(broken), "dev"],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert "is incomplete (no working python or pip in it): making it again" in completed.stderr
    assert completed.returncode != 0  # nothing to install from
    pip = subprocess.run(
        [str(broken / "bin" / "python"), "-m", "pip", "--version"], capture_output=True, text=True
    )
    assert pip.returncode == 0 and not list(broken.glob(".installed-*"))


def test_newcomer_errors_are_one_line(tmp_path):
    missing = tmp_path / "nothing-here"
    report = inv("report", "--results", str(missing), "--output", str(tmp_path / "out"))
    assert report.returncode == 2
    assert report.stderr.strip() == (
        f"error: results directory {missing} does not exist: run `inv run` first, or give --results"
    )
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no.sock"}
    build = subprocess.run(
        [sys.executable, "-m", "invoke", "build", "--arch", "x86_64"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert build.returncode == 2 and len(build.stderr.strip().splitlines()) == 1
    assert f"no Docker engine answers at unix://{tmp_path}/no.sock" in build.stderr
    assert "bash scripts/docker.sh" in build.stderr
    helped = inv("run", "-h")  # help, not --host
    assert helped.returncode == 0 and "Usage: inv[oke] [--core-opts] run" in helped.stdout


def _task_names() -> list[str]:
    listing = json.loads(inv("--list", "--list-format", "json").stdout)
    return [task["name"] for task in listing["tasks"]]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_task_answers_help(flag):
    """`inv search --help` once said "unknown spec '--help'" (its spec was positional)."""
    names = _task_names()
    assert {"run", "search", "report", "regress", "plan", "project", "specs"} <= set(names)
    unanswered = []
    for name in names:
        helped = inv(name, flag, timeout=120)
        if helped.returncode != 0 or f"Usage: inv[oke] [--core-opts] {name} " not in helped.stdout:
            unanswered.append((name, helped.returncode, helped.stderr.strip()[-200:]))
    assert unanswered == []


def test_help_and_defaults_name_the_statistics_the_gate_uses():
    """The gate is Welch's t on the logarithms of per-process rates (suite.stats.ratio_interval),
    not Mann-Whitney (what it used before)."""
    helped = " ".join(inv("regress", "--help").stdout.split())
    assert "Welch's t on log images/sec" in helped and "Mann" not in helped
    defaults = (ROOT / "invoke.yaml").read_text()
    assert "Welch's t on logs" in defaults and "Mann" not in defaults


def test_a_host_disk_that_is_not_a_writable_directory_is_one_line_before_any_trial(tmp_path):
    """`inv run --host-disk`, `inv search --host-disk` and invoke.yaml's suite.host_disk (here
    through INVOKE_SUITE_HOST_DISK): one line naming the option and the path, nothing run."""
    spec, missing, a_file = tmp_path / "tiny.toml", tmp_path / "no-disk", tmp_path / "disk.img"
    spec.write_text(TINY)
    a_file.write_text("")
    results = tmp_path / "results"
    wrong = inv("run", "--spec", str(spec), "--results", str(results), "--host-disk", str(missing))
    assert wrong.returncode == 2
    assert wrong.stderr.strip() == (
        f"error: --host-disk {missing}: no such directory; give an existing directory"
    )
    wrong = inv("search", "--results", str(results), "--host-disk", str(a_file))
    assert wrong.stderr.strip() == (
        f"error: --host-disk {a_file}: a file, not a directory; give a directory"
    )
    env = {**os.environ, "INVOKE_SUITE_HOST_DISK": str(missing)}
    wrong = subprocess.run(
        [sys.executable, "-m", "invoke", "run", "--spec", str(spec), "--results", str(results)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert wrong.returncode == 2 and f"--host-disk {missing}: no such" in wrong.stderr
    assert not list(results.glob("*.jsonl"))


def test_search_takes_the_default_spec_like_the_other_tasks(tmp_path):
    completed = inv("search", "--study", "nope", "--results", str(tmp_path / "r"))
    assert completed.returncode == 2
    assert completed.stderr.strip().endswith(
        "study 'nope' is not a max-resolution or max-batch study; those are: "
        "googlenet-max-resolution, googlenet-max-batch"
    )
    assert "smoke.toml" in completed.stderr


def test_progress_reaches_a_pipe_line_by_line_while_the_run_goes_on(tmp_path):
    """Issue 27: with stdout a pipe (cron, nightly.sh, tee) progress came only when the run
    ended. The first trial's line must arrive while the run still has its trials ahead: the
    records file then holds fewer than all of them and the process is running. Two processes
    of one tiny trial, without LMS: what is read here is the lines, not what the trials do."""
    spec, results = tmp_path / "tiny.toml", tmp_path / "results"
    spec.write_text(ONE_TRIAL.replace("timeout = 300", "timeout = 300\nrepeats = 2"))
    # as cron runs it: Python's own buffering, whatever this shell says
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open(tmp_path / "stderr", "w") as errors:
        process = subprocess.Popen(
            [str(ROOT / "inv"), "run", "--spec", str(spec), "--results", str(results)],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=errors,
            text=True,
            env=env,
        )
        try:
            lines = []
            for line in process.stdout:
                lines.append(line)
                if line.startswith("[trial 1/2]"):
                    break
            recorded = results.glob("*.jsonl")
            records = sum(len(path.read_text().splitlines()) for path in recorded)
            assert process.poll() is None and records < 2, (records, lines)
            rest = process.stdout.read()
            assert process.wait(timeout=900) == 0, (tmp_path / "stderr").read_text()
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
    assert lines[0].startswith("spec tiny: 2 trials; 0 already recorded")
    assert "[trial 2/2]" in rest and "records: " in rest


def test_a_file_or_an_unwritable_directory_is_one_line(tmp_path):
    """`--results` naming a file or an unwritable directory, an unwritable `--output`: one line
    naming the option and the path, before any work (the run and the plans start nothing)."""
    a_file = tmp_path / "results.jsonl"
    a_file.write_text("")
    spec = tmp_path / "tiny.toml"
    spec.write_text(TINY)
    for task in (["run", "--spec", str(spec)], ["report"], ["baseline"], ["search"]):
        wrong = inv(*task, "--results", str(a_file))
        assert wrong.returncode == 2, (task, wrong.stderr)
        assert wrong.stderr.strip() == (
            f"error: --results {a_file}: a file, not a directory; give a directory"
        ), task
    results = tmp_path / "results"
    store_host(results, HOST)
    write_record(results, record("h1", "ref", "aaaa", 10.0, 0.1))
    with unwritable(tmp_path / "locked") as locked:
        commands = [
            ("--results", "run", "--spec", str(spec), "--results", str(locked)),
            ("--output", "report", "--results", str(results), "--output", str(locked)),
            ("--output", "plan", "--spec", str(spec), "--output", str(locked)),
            ("--output", "project", "--spec", str(spec), "--output", str(locked)),
            ("--output", "baseline", "--results", str(results), "--output", f"{locked}/b.json"),
            ("--output", "regress", "--results", str(results), "--output", str(locked)),
            ("--to", "publish", "--reports", str(results), "--to", str(locked)),
        ]
        for option, *command in commands:
            wrong = inv(*command)
            assert wrong.returncode == 2, (command, wrong.stderr)
            (line,) = wrong.stderr.strip().splitlines()
            assert line.startswith(f"error: {option} {locked}: cannot write there ("), line
            assert line.endswith("); give a directory you can write to"), line
        assert list(locked.iterdir()) == []


def test_a_record_of_the_wrong_type_is_skipped_with_its_file_and_line(tmp_path):
    """A hand-edited `images_per_sec: "fast"` is one warning naming file:line and the field; the
    report renders from the records that stand."""
    results = tmp_path / "results"
    store_host(results, HOST)
    path = results_file(results, "h1")
    write_record(results, record("h1", "ref", "aaaa", 10.0, 0.1))
    damaged = record("h1", "ref", "aaaa", 10.0, 0.1, repeat=1)
    damaged["metrics"]["images_per_sec"] = "fast"
    with open(path, "a") as handle:
        handle.write(json.dumps(damaged) + "\n")
    completed = inv("report", "--results", str(results), "--output", str(tmp_path / "out"))
    assert completed.returncode == 0, completed.stderr
    assert completed.stderr.strip() == (
        f"{path}:2: skipping a damaged record: field 'metrics.images_per_sec' = \"fast\" is "
        "invalid; allowed: a table {mean, stderr, jitter, total} or null; `inv run` of its spec "
        "runs the trial again"
    )
    assert (tmp_path / "out" / "report.md").exists()


def test_a_reader_that_leaves_early_gets_no_traceback():
    """`inv specs | head -0`: the reader is gone before the task prints (the pipe is closed
    while Python is still starting); the task ends quietly with 141, as a shell reports SIGPIPE,
    not with a BrokenPipeError traceback."""
    process = subprocess.Popen(
        [sys.executable, "-m", "invoke", "specs"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    process.stdout.close()
    _, errors = process.communicate(timeout=120)
    assert b"Traceback" not in errors
    assert process.returncode == 141


def test_history_prints_a_line_per_file_and_one_line_for_no_records(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(ROOT / "tests" / "support" / "records_v1" / "6a062dc" / "results", results)
    completed = inv("history", "--results", str(results), "--output", str(tmp_path / "history"))
    assert completed.returncode == 0, completed.stderr
    folder = tmp_path / "history"
    assert completed.stdout.splitlines() == [
        f"history: {folder / 'history.md'}",
        f"history data: {folder / 'history.json'}",
        f"history plot: {folder / 'history-googlenet.png'} (googlenet)",
    ]
    (tmp_path / "empty").mkdir()
    for given, said in (
        ("empty", f"error: no records in {tmp_path / 'empty'}: nothing to show a history of"),
        ("missing", f"error: results directory {tmp_path / 'missing'} does not exist"),
    ):
        completed = inv("history", "--results", str(tmp_path / given), "--output", str(folder))
        assert completed.returncode == 2 and completed.stdout == ""
        assert completed.stderr.count("\n") == 1 and completed.stderr.startswith(said)
