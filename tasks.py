"""Tasks of the LMS benchmark suite (`inv --list`). Thin: options in, `suite` functions out."""

import json
import os
import shutil
import sys
from pathlib import Path

from invoke import Collection, Exit, task

from suite.errors import SuiteError
from suite.records import readable_directory, writable_directory, writable_file
from suite.running.interrupts import RunInterrupted, exit_code

ROOT = Path(__file__).resolve().parent
# Progress reaches a file or a pipe (cron, scheduled/nightly.sh, `| tee`) line by line as it is
# printed, from every thread and from the containers whose output is forwarded, not when the
# process ends: Python buffers stdout in blocks unless it is a terminal.
sys.stdout.reconfigure(line_buffering=True)


def _user_errors(function):
    """Print a user error as one line and exit non-zero; bugs keep their traceback."""

    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except RunInterrupted as error:  # stopped by a signal: 130 / 143, as a shell says
            raise Exit(f"stopped: {error}", code=exit_code(error)) from None
        except SuiteError as error:
            raise Exit(f"error: {error}", code=2) from None
        except BrokenPipeError:  # `inv specs | head`: the reader left; nothing more to say
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise Exit(code=141) from None  # 128 + SIGPIPE, as a shell reports it

    wrapper.__name__, wrapper.__doc__ = function.__name__, function.__doc__
    wrapper.__wrapped__ = function
    return wrapper


@task(
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
        "round": "only every trial's N-th process, and sweeps and searches with N = 1 (how runs "
        "that share this machine are interleaved)",
        "run_id": "the run the records belong to (rounds of one interleaved run share it)",
    },
)
@_user_errors
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
):
    """Run a spec: natively here, or in the images `inv build` just built (`invoke build run`),
    or on the Docker hosts given."""
    from suite.dispatch import SpecRun, choose_hosts, dispatch, parse_round
    from suite.specs import load_spec

    overrides = {"resolution": resolution, "batch": batch, "steps": steps, "precision": precision}
    loaded = load_spec(spec or c.suite.spec, overrides)  # validated here, before any host
    results = writable_directory(Path(results or c.suite.results), "--results")
    places = choose_hosts(
        hosts, c.suite.get("hosts"), c.suite.image, c.suite.get("built"), native, label=host
    )
    job = SpecRun(loaded, results, overrides, force, run_id)
    failed, hosts_run = dispatch(job, places, round_=parse_round(round))
    if failed:
        raise Exit(f"error: {failed} of {hosts_run} hosts failed", code=1)


@task(
    help={
        "arch": "native (this machine's), x86_64, aarch64, ppc64le or all (default: invoke.yaml "
        "suite.build.arch)",
        "base": "'local' (debootstrap + docker import here, cached) or a base image name",
        "extras": "TensorFlow from PyPI: cpu, gpu, or none (ppc64le always none)",
    }
)
@_user_errors
def build(c, arch=None, base=None, extras=None):
    """Build the suite image(s) from images/Dockerfile with the docker SDK (streamed log)."""
    from suite.hosts.images import build_images, facts_line

    settings = c.suite.build
    built = build_images(arch or settings.arch, base or settings.base, extras or settings.extras)
    for facts in built:
        print(facts_line(facts))
    # `invoke build run`: the run that follows in this invocation uses these images
    c.config.suite.built = [facts["tag"] for facts in built]


@task(
    auto_shortflags=False,  # -h stays help, not --host
    help={
        "spec": "spec name (suite/specs/NAME.toml) or path to a .toml file; default: smoke",
        "study": "a max-resolution or max-batch study of the spec; default: all of them",
        "results": "results directory",
        "host": "host name the records are filed under; default: this machine's hostname",
        "force": "search again (and re-run the trials) even where records exist",
    },
)
@_user_errors
def search(c, spec=None, study=None, results=None, host=None, force=False):
    """Find the largest resolution or batch that trains, LMS off and on (limit searches)."""
    from suite.running.runner import run_spec, search_studies, summary_lines
    from suite.specs import load_spec

    loaded = load_spec(spec or c.suite.spec)
    studies = search_studies(loaded, study)
    results = writable_directory(Path(results or c.suite.results), "--results")
    summary = run_spec(loaded, results, host, force, studies=studies)
    print("\n".join(summary_lines(summary)))


@task(
    help={
        "results": "results directory to read",
        "output": "directory the report and its plots are written to",
    }
)
@_user_errors
def report(c, results=None, output=None):
    """Render the Markdown report (tables and plots) from the stored records."""
    from suite.reporting.report import render_report

    results = readable_directory(Path(results or c.suite.results), "--results")
    path = render_report(results, writable_directory(Path(output or c.suite.reports), "--output"))
    print(f"report: {path}")


@task(
    help={
        "results": "results directory to read",
        "output": "directory the history page, its data and its plots are written to (default: "
        "history/ in invoke.yaml suite.reports, which `inv publish` publishes)",
        "baseline": "also check every run against this baseline file (`inv baseline`'s)",
    }
)
@_user_errors
def history(c, results=None, output=None, baseline=None):
    """Write the history of every run: throughput, limits, verdicts and what changed, per run."""
    from suite.reporting.history import build_history
    from suite.reporting.history_page import write_history

    results = readable_directory(Path(results or c.suite.results), "--results")
    output = writable_directory(Path(output or Path(c.suite.reports) / "history"), "--output")
    tolerance, alpha = c.suite.regress.tolerance, c.suite.regress.alpha
    files = write_history(build_history(results, baseline, tolerance, alpha), output)
    print("\n".join(files.lines()))


@task(
    help={
        "reports": "directory of the rendered report (default: invoke.yaml suite.reports)",
        "to": "publish directory (default: invoke.yaml suite.publish)",
        "results": "results directory the history is built from (default: invoke.yaml "
        "suite.results, if it exists)",
        "baseline": "baseline file the history also checks each run against (default: "
        "invoke.yaml suite.baseline, if it exists)",
    }
)
@_user_errors
def publish(c, reports=None, to=None, results=None, baseline=None):
    """Publish the rendered report as a static site: a dated page (and its Markdown) per run,
    the index newest first."""
    from suite.reporting.publish import publish as publish_report

    reports = readable_directory(Path(reports or c.suite.reports), "--reports")
    if results:
        results = readable_directory(Path(results), "--results")
    elif Path(c.suite.results).is_dir():
        results = Path(c.suite.results)
    if not baseline and Path(c.suite.baseline).is_file():
        baseline = c.suite.baseline
    done = publish_report(
        reports,
        writable_directory(Path(to or c.suite.publish), "--to"),
        results_dir=results,
        baseline=Path(baseline) if baseline else None,
        gate={"tolerance": c.suite.regress.tolerance, "alpha": c.suite.regress.alpha},
    )
    print(f"published: {done.folder} (site: {done.index})")
    if done.history:
        print(f"history not rebuilt: {done.history}")
    if done.missing:
        print(
            f"published without {len(done.missing)} plot(s) the report refers to: "
            f"{', '.join(done.missing)} (not in {reports})"
        )


@task(
    help={
        "results": "results directory to read",
        "output": "baseline file to write; default: invoke.yaml suite.baseline",
    }
)
@_user_errors
def baseline(c, results=None, output=None):
    """Accept the newest run of every host and workload as the regression baseline."""
    from suite.reporting.baseline import make_baseline

    path = writable_file(Path(output or c.suite.baseline), "--output")
    accepted = make_baseline(
        readable_directory(Path(results or c.suite.results), "--results"), path
    )
    print(f"baseline: {path} ({len(accepted.entries)} host/workload entries)")


@task(
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
@_user_errors
def regress(c, results=None, baseline=None, tolerance=None, alpha=None, output=None):
    """Compare the newest runs with the baseline (Welch's t on log rates); exit 1 if regressed."""
    from suite.reporting.baseline import load_baseline
    from suite.reporting.regress import compare, table, thresholds, write_regression

    tolerance, alpha = thresholds(
        tolerance or c.suite.regress.tolerance, alpha or c.suite.regress.alpha
    )
    output = writable_directory(Path(output or c.suite.reports), "--output")
    results = readable_directory(Path(results or c.suite.results), "--results")
    accepted = load_baseline(Path(baseline or c.suite.baseline))
    rows = compare(accepted, results, tolerance, alpha)
    print(table(rows))
    path = write_regression(rows, output, tolerance, alpha)
    print(f"regression check: {path} (`inv report` adds it to the report)")
    regressions = [r for r in rows if r.verdict == "regression"]
    if regressions:
        message = f"error: {len(regressions)} regression(s) beyond {tolerance:.0%} with p < {alpha}"
        raise Exit(message, code=1)


@task(
    help={
        "resolution": "input side in pixels (voxels for 3D); default: each workload's reference",
        "batch": "batch size the activation sizes are computed for",
        "precision": "fp32, fp16 or bf16",
        "workload": "one workload only",
    }
)
@_user_errors
def models(c, resolution=None, batch=None, precision=None, workload=None):
    """Print each workload's parameter count and largest activation at a resolution."""
    from suite.workloads.summary import models_table

    settings = c.suite.models
    print(
        models_table(workload, resolution, batch or settings.batch, precision or settings.precision)
    )


@task(
    auto_shortflags=False,  # -h stays help, not --host-memory
    help={
        "spec": "spec name or path; default: smoke",
        "workload": "only this workload's trials",
        "resolution": "override the resolution (as in `inv run`)",
        "batch": "override the batch size",
        "precision": "override the precision",
        "device_memory": "a GPU's memory to plan for (on another host), e.g. 16GiB; default: "
        "the spec's lms.device_memory or memory_budget, else this host's GPU",
        "host_memory": "the planned host's memory, e.g. 512GiB, that each plan's host need is "
        "checked against; default: the spec's lms.host_memory, else this host's available "
        "memory, or with --device-memory (another host) not checked",
        "output": "directory for the memory plots (one per plan: plan-SPEC-STUDY-WORKLOAD-"
        "RESpx-bBATCH-lms-off|on.png)",
    },
)
@_user_errors
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
    from suite.specs import load_spec
    from suite.units import size_option

    # parsed once, here: "1.5" has no unit, refused before any work; the suite takes bytes
    device_memory = size_option("--device-memory", device_memory)
    host_memory = size_option("--host-memory", host_memory)
    overrides = {"resolution": resolution, "batch": batch, "precision": precision}
    loaded = load_spec(spec or c.suite.spec, overrides)
    output = writable_directory(Path(output or c.suite.reports), "--output")
    from suite.running.planning import plan_spec, show_lms_messages  # TensorFlow: after the checks

    show_lms_messages()
    results = Path(c.suite.results)
    plans = plan_spec(loaded, output, workload, device_memory, results, host_memory)
    # stdout is the JSON; progress and messages: stderr
    print(json.dumps([p.to_dict() for p in plans], indent=1))


@task(
    auto_shortflags=False,  # -h stays help, not --host-memory
    help={
        "spec": "spec to project (default: suite.spec)",
        "link": "comma-separated named links (lms.link.LINKS; default: all) or bandwidths (2GB/s)",
        "gpu": "host (measure here; default) or v100, a100, h100 (roofline estimate)",
        "host_memory": "the projected host's memory, e.g. 512GiB, that each plan's host need "
        "is checked against; default: the spec's lms.host_memory, else with --gpu host this "
        "host's available memory, with a named GPU (another host) not checked",
        "workload": "only this workload's trials",
        "resolution": "override the resolution (as in `inv run`)",
        "batch": "override the batch size",
        "precision": "override the precision",
        "output": "directory of projection.json (default: suite.reports)",
    },
)
@_user_errors
def project(
    c,
    spec=None,
    link=None,
    gpu="host",
    host_memory=None,
    workload=None,
    resolution=None,
    batch=None,
    precision=None,
    output=None,
):
    """Project the LMS trials' images/sec on named CPU-GPU links (JSON; a section of the report)."""
    from suite.specs import load_spec
    from suite.units import size_option

    host_memory = size_option("--host-memory", host_memory)  # bytes; refused before any work
    names = [n.strip() for n in link.split(",") if n.strip()] if link else None
    overrides = {"resolution": resolution, "batch": batch, "precision": precision}
    loaded = load_spec(spec or c.suite.spec, overrides)
    output = writable_directory(Path(output or c.suite.reports), "--output")
    from suite.running.projection import project_spec  # TensorFlow: after the checks

    results = project_spec(loaded, output, names, gpu, workload, host_memory)
    # stdout is the JSON; progress: stderr
    print(json.dumps([p.to_dict() for p in results], indent=1))


@task
@_user_errors
def hostinfo(c):
    """Print this host's description (JSON), as records reference it."""
    from suite.hosts.description import capture_host_description

    print(json.dumps(capture_host_description(), indent=1, sort_keys=True))


@task(
    auto_shortflags=False,  # -h stays help, not --host
    help={
        "mode": "gpu (the GPU TensorFlow sees) or two-device (the GPU mechanism on two logical "
        "CPU devices; GPU-only parts not run); default: gpu where nvidia-smi lists a GPU",
        "results": "results directory: gpucheck/HOST.json, the host description, logs/HOST/",
        "host": "host name the check is filed under; default: this machine's hostname",
    },
)
@_user_errors
def gpucheck(c, mode=None, results=None, host=None):
    """Accept a GPU host before trusting its numbers: five checks of LMS's GPU path in fresh
    processes; exit 1 with a line per failure."""
    from suite.running.gpucheck import record, run_gpucheck, verdict_line

    results = writable_directory(Path(results or c.suite.results), "--results")
    run = run_gpucheck(results, host, mode)
    path = record(run, results)
    print(verdict_line(run))
    print(
        f"recorded: {path} and host description {run.host_ref}; trials run on this machine "
        "from now on carry it (the report's hosts table)"
    )
    if run.failures:
        raise Exit("\n".join(f"FAILED {line}" for line in run.failures), code=1)


@task
@_user_errors
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
    selector = f" -k {json.dumps(k)}" if k else ""
    with c.cd(str(ROOT)):
        skipped = []
        if docker:  # the container tests need a Docker engine: install and start one if missing
            c.run("bash scripts/docker.sh", echo=True)
        else:
            skipped.append("not docker")
        if slurm:  # the Slurm tests need a real one: munge, slurmctld, slurmd on this machine
            c.run("bash scripts/slurm.sh", echo=True)
        else:
            skipped.append("not slurm")
        if chromium:  # the published site is checked in a real browser: Debian's chromium
            c.run("bash scripts/chromium.sh", echo=True)
        else:
            skipped.append("not chromium")
        marker = f" -m {json.dumps(' and '.join(skipped))}" if skipped else ""
        if lint:
            c.run(f"{sys.executable} -m ruff check .", echo=True)
            c.run(f"{sys.executable} -m ruff format --check .", echo=True)
        c.run(f"{sys.executable} -m pytest -ra{marker}{selector}", echo=True, pty=False)
        # the CPU kernels this CPU does not default to (oneDNN's without AVX-512, Eigen's with
        # it): the tests that depend on them, once more, so CI covers both on any CPU
        probe = "import lms; print(int(lms.cpu_kernels() == 'onednn'))"
        onednn = c.run(f'{sys.executable} -c "{probe}"', hide=True).stdout.strip().splitlines()
        other = "0" if onednn and onednn[-1] == "1" else "1"
        kernels = f" -m {json.dumps(' and '.join(['kernels', *skipped]))}"
        again = c.run(
            f"TF_ENABLE_ONEDNN_OPTS={other} {sys.executable} -m pytest -ra{kernels}{selector}",
            echo=True,
            pty=False,
            warn=True,
        )
        if again.exited not in (0, 5):  # 5: -k left none of them
            raise Exit(f"the tests with TF_ENABLE_ONEDNN_OPTS={other} failed", code=again.exited)
        # on a GPU host: the gpu-marked tests in a session of their own, with the GPU visible
        # (the session above hides it: tests/conftest.py)
        if _has_gpu(c):
            gpu = c.run(
                f"LMS_TEST_GPU=1 {sys.executable} -m pytest -ra -m gpu{selector}",
                echo=True,
                pty=False,
                warn=True,
            )
            if gpu.exited not in (0, 5):
                raise Exit("the GPU tests failed", code=gpu.exited)
        if compat:
            venv = ROOT / ".venv-tf2.14"
            c.run(f"bash scripts/venv.sh {venv} tf214,dev", echo=True)
            c.run(f"{venv}/bin/python -m pytest -ra -m compat{selector}", echo=True)


def _has_gpu(c) -> bool:
    """Whether this host has an NVIDIA GPU (nvidia-smi lists one): then `inv test` runs the
    gpu-marked tests too."""
    if shutil.which("nvidia-smi") is None:
        return False
    return c.run("nvidia-smi -L", hide=True, warn=True).ok


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
