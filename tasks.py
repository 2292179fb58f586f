"""Tasks of the LMS benchmark suite (`inv --list`). Thin: options in, `suite` functions out."""

import functools
import json
import os
import sys
from pathlib import Path

from invoke import Collection, Exit, task

from suite.errors import SuiteError
from suite.records import readable_directory, writable_directory, writable_file

ROOT = Path(__file__).resolve().parent
# Progress reaches a file or a pipe (cron, scheduled/nightly.sh, `| tee`) line by line as it is
# printed, from every thread and from the containers whose output is forwarded, not when the
# process ends: Python buffers stdout in blocks unless it is a terminal.
sys.stdout.reconfigure(line_buffering=True)
# the overrides of a spec's sizes that planning and projecting take, as `inv run` does
SIZE_OVERRIDES = {f: f"override the {f} (as in `inv run`)" for f in ("resolution", "batch")}
SIZE_OVERRIDES["precision"] = "override the precision (as in `inv run`)"


def suite_task(**options):
    """`@task(**options)` of a task that calls the suite: a user error (a SuiteError; a run
    stopped by a signal: 130 / 143, as a shell says) ends it as one line and its exit code;
    bugs keep their traceback."""

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            try:
                return function(*args, **kwargs)
            except SuiteError as error:
                raise Exit(error.line(), code=error.exit_code) from None
            except BrokenPipeError:  # `inv specs | head`: the reader left; nothing more to say
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
                raise Exit(code=141) from None  # 128 + SIGPIPE, as a shell reports it

        return task(**options)(wrapper)

    return decorate


@suite_task(
    auto_shortflags=False,  # -h stays help (`inv run -h`), not --host
    help={
        "spec": "spec name (suite/specs/NAME.toml) or path to a .toml file; default: smoke",
        "results": "results directory (one JSON-lines file per host)",
        "host": "host name the records are filed under; default: this machine's hostname",
        "resolution": "override every trial's resolution (changes the spec hash)",
        "batch": "override every trial's batch size (changes the spec hash)",
        "steps": "override every trial's timed steps (changes the spec hash)",
        "precision": "override every trial's precision: fp32, fp16 or bf16 (changes the hash)",
        "force": "re-run trials that are already recorded",
        "hosts": "run on these hosts at once: names from invoke.yaml suite.hosts (Docker engines, "
        "Slurm clusters) or ssh://user@host; default: natively on this machine, or after "
        "`inv build` in the same invocation, the invoke.yaml hosts of the images it built",
        "native": "also run natively on this machine (with --hosts or after build)",
        "round": "only every trial's N-th process, sweeps and searches with N = 1 (interleaving)",
        "run_id": "the run the records belong to (rounds of one interleaved run share it)",
        "host_disk": "a directory on a local disk lent to every LMS trial (emulated device): host "
        "arrays beyond the RAM go there; not hashed; default: invoke.yaml suite.host_disk",
    },
)
def run(
    c,
    spec=None,
    results=None,
    host=None,
    resolution=None,
    batch=None,
    steps=None,
    precision=None,
    force=False,
    hosts=None,
    native=False,
    round=None,
    run_id=None,
    host_disk=None,
):
    """Run a spec: natively here, or in the images `inv build` just built (`invoke build run`),
    or on the Docker hosts given."""
    from suite.dispatch import run_command

    overrides = {"resolution": resolution, "batch": batch, "steps": steps, "precision": precision}
    where = spec, results, hosts, native, host, host_disk  # checked before any host runs
    failed, hosts_run = run_command(c.suite, overrides, *where, force, run_id, round)
    if failed:
        raise Exit(f"error: {failed} of {hosts_run} hosts failed", code=1)


@suite_task(
    help={
        "arch": "native (this machine's), x86_64, aarch64, ppc64le or all (default: invoke.yaml "
        "suite.build.arch)",
        "base": "'local' (debootstrap + docker import here, cached) or a base image name",
        "extras": "TensorFlow from PyPI: cpu, gpu, or none (ppc64le always none)",
    }
)
def build(c, arch=None, base=None, extras=None):
    """Build the suite image(s) from images/Dockerfile with the docker SDK (streamed log)."""
    from suite.hosts.images import build_images, facts_line

    settings = c.suite.build
    built = build_images(arch or settings.arch, base or settings.base, extras or settings.extras)
    for facts in built:
        print(facts_line(facts))
    # `invoke build run`: the run that follows in this invocation uses these images
    c.config.suite.built = [facts["tag"] for facts in built]


@suite_task(
    auto_shortflags=False,  # -h stays help, not --host
    help={
        "spec": "spec name (suite/specs/NAME.toml) or path to a .toml file; default: smoke",
        "study": "a max-resolution or max-batch study of the spec; default: all of them",
        "results": "results directory",
        "host": "host name the records are filed under; default: this machine's hostname",
        "force": "search again (and re-run the trials) even where records exist",
        "host_disk": "a directory on a local disk lent to every LMS trial (emulated device), as "
        "in `inv run`; default: invoke.yaml suite.host_disk",
    },
)
def search(c, spec=None, study=None, results=None, host=None, force=False, host_disk=None):
    """Find the largest resolution or batch that trains, LMS off and on (limit searches)."""
    from suite.running.runner import search_command
    from suite.specs import load_spec

    s = c.suite
    where = results or s.results, host, force, host_disk or s.get("host_disk")
    print("\n".join(search_command(load_spec(spec or s.spec), study, *where)))


@suite_task(
    help={
        "results": "results directory to read",
        "output": "directory the report and its plots are written to",
    }
)
def report(c, results=None, output=None):
    """Render the Markdown report (tables and plots) from the stored records."""
    from suite.reporting.report import render_report

    results = readable_directory(Path(results or c.suite.results), "--results")
    path = render_report(results, writable_directory(Path(output or c.suite.reports), "--output"))
    print(f"report: {path}")


@suite_task(
    help={
        "results": "results directory to read",
        "output": "directory the history page, its data and its plots are written to (default: "
        "history/ in invoke.yaml suite.reports, which `inv publish` publishes)",
        "baseline": "also check every run against this baseline file (`inv baseline`'s)",
    }
)
def history(c, results=None, output=None, baseline=None):
    """Write the history of every run: throughput, limits, verdicts and what changed, per run."""
    from suite.reporting.history import build_history
    from suite.reporting.history_page import write_history

    results = readable_directory(Path(results or c.suite.results), "--results")
    output = writable_directory(Path(output or Path(c.suite.reports) / "history"), "--output")
    tolerance, alpha = c.suite.regress.tolerance, c.suite.regress.alpha
    files = write_history(build_history(results, baseline, tolerance, alpha), output)
    print("\n".join(files.lines()))


@suite_task(
    help={
        "reports": "directory of the rendered report (default: invoke.yaml suite.reports)",
        "to": "publish directory (default: invoke.yaml suite.publish)",
        "results": "results directory the history is built from (default: invoke.yaml "
        "suite.results, if it exists)",
        "baseline": "baseline file the history also checks each run against (default: "
        "invoke.yaml suite.baseline, if it exists)",
    }
)
def publish(c, reports=None, to=None, results=None, baseline=None):
    """Publish the rendered report as a static site: a dated page (and its Markdown) per run,
    the index newest first."""
    from suite.reporting.publish import publish_command

    s = c.suite
    gate = {"tolerance": s.regress.tolerance, "alpha": s.regress.alpha}
    places = reports or s.reports, to or s.publish
    print("\n".join(publish_command(*places, gate, results, baseline, (s.results, s.baseline))))


@suite_task(
    help={
        "results": "results directory to read",
        "output": "baseline file to write; default: invoke.yaml suite.baseline",
    }
)
def baseline(c, results=None, output=None):
    """Accept the newest run of every host and workload as the regression baseline."""
    from suite.reporting.baseline import make_baseline

    path = writable_file(Path(output or c.suite.baseline), "--output")
    results = readable_directory(Path(results or c.suite.results), "--results")
    accepted = make_baseline(results, path)
    print(f"baseline: {path} ({len(accepted.entries)} host/workload entries)")


@suite_task(
    help={
        "results": "results directory to read",
        "baseline": "baseline file; default: invoke.yaml suite.baseline",
        "tolerance": "smallest relative change that counts (default: invoke.yaml "
        "suite.regress.tolerance)",
        "alpha": "significance level: a change counts when the 1 - alpha confidence interval of "
        "the ratio of geometric means (Welch's t on log images/sec, one value per trial process) "
        "excludes 1 (default: invoke.yaml suite.regress.alpha, asv's 0.002)",
        "output": "report directory the regression section is written to",
    }
)
def regress(c, results=None, baseline=None, tolerance=None, alpha=None, output=None):
    """Compare the newest runs with the baseline (Welch's t on log rates); exit 1 if regressed."""
    from suite.reporting.regress import check

    s = c.suite
    tolerance, alpha = tolerance or s.regress.tolerance, alpha or s.regress.alpha
    places = baseline or s.baseline, results or s.results, output or s.reports
    done = check(*places, tolerance, alpha)
    print("\n".join(done.lines()))
    if done.failure():
        raise Exit(done.failure(), code=1)


@suite_task(
    help={
        "resolution": "input side in pixels (voxels for 3D); default: each workload's reference",
        "batch": "batch size the activation sizes are computed for",
        "precision": "fp32, fp16 or bf16",
        "workload": "one workload only",
    }
)
def models(c, resolution=None, batch=None, precision=None, workload=None):
    """Print each workload's parameter count and largest activation at a resolution."""
    from suite.workloads.summary import models_table

    s = c.suite.models
    print(models_table(workload, resolution, batch or s.batch, precision or s.precision))


@suite_task(
    auto_shortflags=False,  # -h stays help, not --host-memory
    help={
        "spec": "spec name or path; default: smoke",
        "workload": "only this workload's trials",
        **SIZE_OVERRIDES,
        "device_memory": "a GPU's memory to plan for (on another host), e.g. 16GiB; default: "
        "the spec's lms.device_memory or memory_budget, else this host's GPU",
        "host_memory": "the planned host's memory, e.g. 512GiB, that each plan's host need is "
        "checked against; default: the spec's lms.host_memory, else this host's available "
        "memory, or with --device-memory (another host) not checked",
        "output": "the memory plots' directory (plan-SPEC-STUDY-WORKLOAD-RESpx-bBATCH-lms-on.png)",
    },
)
def plan(
    c,
    spec=None,
    workload=None,
    resolution=None,
    batch=None,
    precision=None,
    device_memory=None,
    host_memory=None,
    output=None,
):
    """Print LMS's plans (JSON) for a spec's trials and plot each one's memory, without running."""
    from suite.running.planning import plan_command

    overrides = {"resolution": resolution, "batch": batch, "precision": precision}
    output, results = Path(output or c.suite.reports), Path(c.suite.results)
    sizes = device_memory, host_memory  # text: the suite parses them
    # stdout is the JSON; progress and lms's messages: stderr
    print(plan_command(spec or c.suite.spec, overrides, output, workload, *sizes, results))


@suite_task(
    auto_shortflags=False,  # -h stays help, not --host-memory
    help={
        "spec": "spec to project (default: suite.spec)",
        "link": "comma-separated named links (default: all) or bandwidths (2GB/s)",
        "gpu": "host (measure here; default) or v100, a100, h100 (roofline estimate)",
        "host_memory": "the projected host's memory (e.g. 512GiB) plans are checked against; "
        "default: the spec's lms.host_memory, else --gpu host's available memory, else none",
        "device_memory": "a named GPU's memory to plan for, e.g. 32GiB; default: the spec's "
        "lms.device_memory, else the GPU's (v100 16GiB, a100 40GiB, h100 80GiB)",
        "workload": "only this workload's trials",
        **SIZE_OVERRIDES,
        "output": "directory of projection.json (default: suite.reports)",
    },
)
def project(
    c,
    spec=None,
    link=None,
    gpu="host",
    host_memory=None,
    device_memory=None,
    workload=None,
    resolution=None,
    batch=None,
    precision=None,
    output=None,
):
    """Project the LMS trials' images/sec on named CPU-GPU links (JSON; a section of the report)."""
    from suite.running.projection import project_command

    overrides = {"resolution": resolution, "batch": batch, "precision": precision}
    output = Path(output or c.suite.reports)
    choices = link, gpu, workload, host_memory, device_memory
    # stdout is the JSON; progress: stderr
    print(project_command(spec or c.suite.spec, overrides, output, *choices))


@suite_task()
def hostinfo(c):
    """Print this host's description (JSON), as records reference it."""
    from suite.hosts.description import capture_host_description

    print(json.dumps(capture_host_description(), indent=1, sort_keys=True))


@suite_task(
    auto_shortflags=False,  # -h stays help, not --host
    help={
        "mode": "gpu (the GPU TensorFlow sees) or two-device (the GPU mechanism on two logical "
        "CPU devices; GPU-only parts not run); default: gpu where nvidia-smi lists a GPU",
        "results": "results directory: gpucheck/HOST.json, the host description, logs/HOST/",
        "host": "host name the check is filed under; default: this machine's hostname",
    },
)
def gpucheck(c, mode=None, results=None, host=None):
    """Accept a GPU host before trusting its numbers: five checks of LMS's GPU path in fresh
    processes; exit 1 with a line per failure."""
    from suite.running.gpucheck import record, recorded_lines, run_gpucheck

    results = writable_directory(Path(results or c.suite.results), "--results")
    run = run_gpucheck(results, host, mode)
    print("\n".join(recorded_lines(run, record(run, results))))
    if run.failures:
        raise Exit("\n".join(f"FAILED {line}" for line in run.failures), code=1)


@suite_task()
def specs(c):
    """List the suite's specs: trials, switch sweeps and limit searches."""
    from suite.specs import describe_specs

    print("\n".join(describe_specs()))


@task(
    help={
        "compat": "also run the compat-marked tests on TensorFlow 2.14.1 (Keras 2) in "
        ".venv-tf2.14 (created on first use)",
        "lint": "run ruff check and ruff format --check first",
        "docker": "run the container tests (installs and starts a Docker engine if missing)",
        "slurm": "run the Slurm tests (installs and starts a two-node Slurm if missing)",
        "chromium": "run the test that loads the published site in headless Chromium "
        "(installs Debian's chromium if missing)",
        "k": "only tests matching this pytest -k expression",
    },
    auto_shortflags=False,  # -h stays help, not --chromium
)
def test(c, compat=True, lint=True, docker=True, slurm=True, chromium=True, k=None):
    """Lint, then run the tests on this environment and the compat tests on TF 2.14.1."""
    from suite.selftest import commands

    setups = {"docker": docker, "slurm": slurm, "chromium": chromium}
    with c.cd(str(ROOT)):
        for command in commands(sys.executable, ROOT, compat, lint, setups, k):
            done = c.run(command.line, echo=True, pty=False, warn=command.passes is not None)
            if command.passes is not None and done.exited not in command.passes:
                raise Exit(command.failure, code=done.exited)


namespace = Collection(
    build,
    run,
    search,
    report,
    baseline,
    regress,
    history,
    publish,
    models,
    plan,
    project,
    hostinfo,
    gpucheck,
    specs,
    test,
)
# defaults: invoke.yaml (suite.*), the only place they are written
