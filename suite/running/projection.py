"""`inv project`: projected images/sec of a spec's LMS trials on named CPU-GPU links.

Two sources of per-op compute times (lms/timing/steptime.py replays either on each link):
- `--gpu host` (default): this machine at the trial's size, measured. The trial's step is built
  with its LMS settings, run, timed (median of a few steps) and profiled once. On the emulated
  device this is what benchmarks/link_projection.py validates against emulated links.
- `--gpu v100|a100|h100`: a roofline estimate from the rewritten graph (lms/timing/roofline.py),
  planned for that GPU's memory (or the spec's `lms.device_memory`); nothing runs, so the seed
  specs' GPU sizes project here too.

A named GPU's host is not this machine: its plans are checked against `--host-memory` (or the
spec's lms.host_memory) only, else not at all (one line says so), and nothing runs, so no closed
loop measures them (calibration_steps 0: no meter of a GPU that is not here).

Results go to `projection.json` beside the report, which `inv report` turns into a section with a
plot of throughput against link bandwidth (measured points where records of emulated links
exist).
"""

import json
import statistics
import sys
import time
from pathlib import Path

import lms
from suite.errors import SuiteError
from suite.lms_seam import HOST_NOT_CHECKED, host_memory_limit, lms_options
from suite.records import LinkProjection, Projection, writable_directory, write_projections
from suite.specs import Spec, Trial, TrialParams, load_spec
from suite.units import size_option

GPU_MEMORY = {"v100": "16GiB", "a100": "40GiB", "h100": "80GiB"}


class NotProjected(SuiteError):
    """A trial whose plan cannot run where it is projected (nothing fits the device, or the
    host cannot hold it): said, and the spec's other trials projected."""


DEFAULT_LINKS = ("nvlink2", "pcie3", "pcie3-shared", "pcie4", "pcie5", "nvlink-c2c")


def _build(params: TrialParams):
    from suite.workloads import build_workload, training

    model, loss_fn = build_workload(
        params.workload, params.resolution, params.batch, params.precision, params.classes
    )
    return training.make_train_step(model, loss_fn, training.make_optimizer(), params.precision)


def _measured(params: TrialParams, host_memory="auto", steps: int = 3):
    """(profile, swaps, median step seconds) of the trial's LMS step run here; its plan's host
    need checked against `host_memory` (bytes, "auto": this host's available memory)."""
    from suite.workloads import data

    options = lms_options(params)
    options.pop("link", None)  # the host's own copies: the links are what is projected
    options["host_memory"] = host_memory
    function = lms.LMS(**options).wrap(_build(params))
    batch = data.synthetic_batch(params.info, params.resolution, params.batch, params.classes)
    try:
        for _ in range(2):  # trace, plan and rewrite; then warm up
            function(*batch)
    except lms.HostMemoryError as error:
        raise NotProjected(f"{params.describe()} here: {error}") from None
    times = []
    for _ in range(steps):
        started = time.perf_counter()
        function(*batch)
        times.append(time.perf_counter() - started)
    profile, swaps = function.profile(*batch)
    return profile, swaps, statistics.median(times)


def _roofline(params: TrialParams, gpu: str, host_memory=None, device_memory=None):
    """(profile, swaps, None): the trial's step planned for `gpu` (with `device_memory` bytes
    when given, else the spec's lms.device_memory, else the GPU's) and estimated on it. The
    GPU's host is not this machine: the plan's host need is checked against `host_memory`
    (bytes) only, and not at all when it is None."""
    from suite.workloads import data

    options = lms_options(params)
    options.pop("link", None)
    if device_memory or not (params.lms or {}).get("device_memory"):
        options["device_memory"] = device_memory or GPU_MEMORY[gpu]
    options["mechanism"] = "device-copy"  # a GPU's swaps, never run here
    options["calibration_steps"] = 0  # nothing runs: no closed loop, no meter of a GPU not here
    options["host_memory"] = host_memory
    function = lms.LMS(**options).wrap(_build(params))
    specs = data.batch_specs(params.info, params.resolution, params.batch, params.classes)
    try:
        callable_, _ = function.prepare(*specs)
    except (lms.NothingFitsError, lms.HostMemoryError) as error:
        raise NotProjected(
            f"{params.workload} {params.resolution}px batch {params.batch} on {gpu}: {error}"
        ) from None
    graph = callable_.graph
    profile = lms.roofline_profile(graph, lms.ROOFLINE_GPUS[gpu], params.batch)
    return profile, lms.swap_graph(graph, params.batch), None


def project_trial(
    trial: Trial, spec: Spec, links: dict, gpu: str, host_memory="auto", device_memory=None
) -> Projection:
    """`host_memory`: what the plan's host need is checked against (bytes; "auto": this host's
    available memory, with --gpu host only; None: not checked); `device_memory`: a named GPU's
    memory to plan for (bytes; None: the spec's, else the GPU's). Raises NotProjected."""
    params = trial.params
    if gpu == "host":
        profile, swaps, step_seconds = _measured(params, host_memory)
    else:
        profile, swaps, step_seconds = _roofline(params, gpu, host_memory, device_memory)
    moved = swaps.bytes_per_direction
    rows = []
    for name, (description, link) in links.items():
        projected = lms.project(profile, swaps, link, step_seconds)
        rows.append(
            LinkProjection(
                link=name,
                description=description,
                bandwidth=link.bandwidth,  # host to device
                out_bandwidth=link.out_bandwidth or link.bandwidth,  # device to host
                latency=link.latency,
                step_seconds=projected.step_seconds,
                images_per_sec=params.batch / projected.step_seconds,
                busy_out_s=projected.busy_out,
                busy_in_s=projected.busy_in,
            )
        )
    compute = lms.project(profile, swaps, None, step_seconds).compute_seconds
    return Projection(
        spec=spec.name,
        study=trial.study,
        spec_hash=trial.hash,
        workload=params.workload,
        resolution=params.resolution,
        batch=params.batch,
        precision=params.precision,
        gpu=gpu,
        compute_seconds=compute,
        images_per_sec_without_link_waits=params.batch / compute,
        out_bytes_per_step=moved["out"],
        in_bytes_per_step=moved["in"],
        swaps=len(swaps.transfers),
        links=tuple(rows),
    )


def _check_sized_for_here(trials) -> None:
    """`--gpu host` profiles a step here. On a machine without a GPU only emulated-device trials
    (with a memory_budget) are sized for that; a seed's GPU-sized trial (GoogLeNet 2240² b15)
    would take hours and tens of GiB, so it is refused with the roofline as the way out."""
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU"):
        return
    for trial in trials:
        if trial.params.memory_budget_bytes is None:
            raise SuiteError(
                f"{trial.study}: {trial.params.describe()} is sized for a GPU (no memory_budget: "
                "not an emulated-device trial) and this machine has none; project it with "
                "--gpu v100, a100 or h100 (a roofline estimate), or on a GPU host"
            )


def projected_trials(spec: Spec, workload: str | None = None) -> list:
    """The spec's LMS trials (of one workload if given), once per configuration: studies that
    differ only in their emulated link project once, the links being the projection's axis."""
    trials, seen = [], set()
    for t in spec.plannable_trials():
        if not t.params.lms or workload not in (None, t.params.workload):
            continue
        unlinked = t.params.replace(lms={k: v for k, v in t.params.lms.items() if k != "link"})
        if unlinked.hash not in seen:
            seen.add(unlinked.hash)
            trials.append(t)
    return trials


def project_spec(
    spec: Spec,
    output_dir: Path,
    link_names=None,
    gpu: str = "host",
    workload: str | None = None,
    host_memory: int | None = None,
    device_memory: int | None = None,
) -> list[Projection]:
    """Projections of the LMS trials of `spec`, written to output_dir/projection.json.

    A plan's host need is checked against `host_memory` (bytes), else the spec's
    lms.host_memory, else, with `gpu` "host", this machine's available memory; for a named GPU
    (another host) it is then not checked (one line on stderr says so). `device_memory`: a
    named GPU's memory (the 32 GB V100 of the seeds' largest runs), else the spec's or the
    GPU's. A trial whose plan does not fit is said on stderr and left out (split-gpu's
    swapping-alone studies beside its split ones); none projected is an error saying why."""
    if gpu != "host" and gpu not in lms.ROOFLINE_GPUS:
        raise SuiteError(f"--gpu {gpu!r}: allowed: host, {', '.join(lms.ROOFLINE_GPUS)}")
    if gpu == "host" and device_memory is not None:
        raise SuiteError(
            "--device-memory plans for another host's GPU: give --gpu "
            + ", ".join(lms.ROOFLINE_GPUS)
            + " (measured here, the trial's own device is used)"
        )
    try:
        links = lms.named_links(link_names or DEFAULT_LINKS)
    except lms.ParameterError as error:
        raise SuiteError(f"--link: {error}") from None
    trials = projected_trials(spec, workload)
    if not trials:
        raise SuiteError(
            f"spec {spec.name} has no LMS trial"
            + (f" of workload {workload!r}" if workload else "")
        )
    if gpu == "host":
        _check_sized_for_here(trials)
    limits = [host_memory_limit(t.params, host_memory, here=gpu == "host") for t in trials]
    if any(limit is None for limit in limits):
        print(HOST_NOT_CHECKED, file=sys.stderr)
    results, refused = [], []
    for number, (trial, limit) in enumerate(zip(trials, limits, strict=True), 1):
        p = trial.params
        # progress on stderr: stdout is the JSON (`inv project > projection.json`)
        print(
            f"[{number}/{len(trials)}] {p.workload} {p.resolution}px batch {p.batch} "
            f"{p.precision} on {gpu} ({trial.study})",
            file=sys.stderr,
        )
        try:
            results.append(project_trial(trial, spec, links, gpu, limit, device_memory))
        except NotProjected as error:
            refused.append(f"{trial.study}: {error}")
            print(f"  not projected: {error}", file=sys.stderr)
    if not results:
        raise SuiteError("no trial projected: " + "; ".join(refused))
    write_projections(output_dir, results)
    return results


def project_command(
    spec: str,
    overrides: dict,
    output_dir: Path,
    links: str | None = None,
    gpu: str = "host",
    workload: str | None = None,
    host_memory: str | None = None,
    device_memory: str | None = None,
) -> str:
    """`inv project`: the projections of `spec` (a name or a path; `overrides` as `inv run` takes
    them) on `links` (comma-separated names or bandwidths; None: all) as the JSON it prints (its
    stdout; progress goes to stderr). Checked first, before any work: the host memory (text,
    e.g. "512GiB": parsed here, once), the spec, the output."""
    host_memory = size_option("--host-memory", host_memory)
    device_memory = size_option("--device-memory", device_memory)
    names = [n.strip() for n in links.split(",") if n.strip()] if links else None
    loaded = load_spec(spec, overrides)
    output_dir = writable_directory(output_dir, "--output")
    results = project_spec(loaded, output_dir, names, gpu, workload, host_memory, device_memory)
    return json.dumps([p.to_dict() for p in results], indent=1)
