"""Render a Markdown report from stored records (never by running anything).

Groups records by workload and spec hash: only records with the same hash describe the same
workload. Per group and host: throughput (mean over repeats), pixels/voxels per second, peak
memory, outcomes. Plus the limits found by searches (`suite.reporting.limits_table`), sweep
plots (`suite.reporting.sweep_plots`), the host descriptions, the parameters behind each hash,
and a bar chart (`suite.reporting.throughput_plot`).
"""

import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import jinja2
from tabulate import tabulate

from suite.errors import SuiteError
from suite.records import (
    HostDescription,
    TrialRecord,
    load_host,
    load_searches,
    load_trials,
    utc_now,
)
from suite.reporting.answer import answer_tables, process_rates, rate_text
from suite.reporting.limits_table import limits_table
from suite.reporting.lms_view import traffic
from suite.reporting.memory_plots import plot_timelines
from suite.reporting.projection_section import projection_section
from suite.reporting.scaling import scaling_section
from suite.reporting.swap_traffic import traffic_text
from suite.reporting.sweep_plots import plot_sweeps
from suite.reporting.throughput_plot import plot_throughput
from suite.running.gpucheck import check_text
from suite.specs.model import lms_text
from suite.stats import ratio_interval, ratio_text
from suite.units import format_bytes

TEMPLATES = Path(__file__).resolve().parents[2] / "reports" / "templates"


@dataclass
class HostResult:
    """All records of one host under one spec hash, summarised."""

    host: str
    records: list[TrialRecord]

    @property
    def ok(self) -> list[TrialRecord]:
        return [r for r in self.records if r.ok]

    def outcomes(self) -> str:
        counts = defaultdict(int)
        for record in self.records:
            counts[record.outcome] += 1
        return ", ".join(f"{n} {outcome}" for outcome, n in sorted(counts.items()))

    def rate(self, key: str) -> tuple[float, float] | None:
        """Mean over repeats, and its error: across repeats if several, else within the trial."""
        values = [r.metrics.rate(key) for r in self.ok if r.metrics and r.metrics.rate(key)]
        if not values:
            return None
        means = [v.mean for v in values]
        if len(means) > 1:
            return statistics.fmean(means), statistics.stdev(means) / len(means) ** 0.5
        return means[0], values[0].stderr

    def peak(self) -> int | None:
        peaks = [r.metrics.peak_memory_bytes for r in self.records if r.metrics]
        peaks = [p for p in peaks if p]
        return max(peaks) if peaks else None


def _fmt_rate(value: tuple[float, float] | None, scale: float = 1.0) -> str:
    if value is None:
        return "—"
    mean, error = value
    return f"{mean / scale:.3g} ± {error / scale:.2g}"


def _group(records: list[TrialRecord]) -> dict:
    """{workload: {spec_hash: {host: HostResult}}}"""
    groups = defaultdict(lambda: defaultdict(dict))
    for record in records:
        by_host = groups[record.params.workload][record.spec_hash]
        by_host.setdefault(record.host, HostResult(record.host, [])).records.append(record)
    return groups


def _throughput_table(by_host: dict, emulated: dict | None = None) -> str:
    """A row per host; with two or more hosts, each host's images/sec relative to the first host
    (alphabetically) that trained: the comparison the report exists for. Hosts in `emulated`
    are marked: their rates are an emulator's."""
    emulated = emulated or {}
    rows = []
    reference = next((h for h, r in sorted(by_host.items()) if process_rates(r.records)), None)
    compare = len(by_host) > 1 and reference is not None
    reference_rates = process_rates(by_host[reference].records) if compare else []
    swapping = any(traffic(r.metrics) for h in by_host.values() for r in h.ok)
    for host, result in sorted(by_host.items()):
        info = result.records[-1].params.info
        rows.append(
            [
                f"{host} ⚠ emulated" if host in emulated else host,
                result.outcomes(),
                rate_text(result.records),
                _fmt_rate(result.rate(info.rate_key), 1e6),
                format_bytes(result.peak()),
                *([traffic_text(result.ok)] if swapping else []),
                result.records[-1].device or "—",
                len(result.records),
            ]
        )
        if compare:
            rates = process_rates(result.records)
            if host == reference:
                versus = "reference"
            elif rates:
                versus = ratio_text(ratio_interval(rates, reference_rates))
            else:  # the host did not train this size
                versus = "—"
            rows[-1].insert(3, versus)
    headers = ["host", "outcomes", "images/sec", info.rate_unit, "peak memory"]
    headers += ["swapped per step (out / in)"] if swapping else []
    headers += ["device", "records"]
    if compare:
        headers.insert(3, f"vs {reference}")
    return tabulate(rows, headers, tablefmt="github", disable_numparse=True)


def _known(value) -> str:
    """A description's value as printed: unknown (null) is an em dash."""
    return "—" if value is None else str(value)


def _link_text(description: HostDescription) -> str:
    """Measured copy bandwidth at three sizes: per GPU host->device / device->host and its
    topology, else host memory (memcpy: what bounds the emulated device's swaps)."""
    link = description.link  # suite.hosts.link's table, checked by suite.records.hosts
    if not link:
        return "—"
    picks = [link["sizes_bytes"].index(s) for s in (2**20, 2**26, 2**30)]

    def rates(values):
        return " / ".join(f"{values[i]:.3g}" for i in picks)

    parts = []
    for gpu, info in zip(link["gpus"], description.gpus or (), strict=False):
        topology = info.link or {}
        how = (
            f"NVLink to CPU x{topology['nvlink_to_cpu']}"
            if topology.get("nvlink_to_cpu")
            else f"PCIe {_known(topology.get('pcie_generation'))} "
            f"x{_known(topology.get('pcie_width'))}"
        )
        parts.append(
            f"GPU{gpu['index']} ({how}): in {rates(gpu['host_to_device_gbps'])}, "
            f"out {rates(gpu['device_to_host_gbps'])}"
        )
    return "; ".join(parts) if parts else f"memcpy {rates(link['memcpy_gbps'])}"


def _newest_refs(records: list[TrialRecord]) -> dict[str, str]:
    """Host -> the description its newest record refers to."""
    return {r.host: r.host_ref for r in records}


def emulated_hosts(records: list[TrialRecord], results_dir: Path) -> dict:
    """Host -> how it is emulated (qemu-user...), for the hosts whose newest description says so."""
    found = {}
    for host, ref in sorted(_newest_refs(records).items()):
        description = load_host(results_dir, ref)
        if description and description.emulation:
            found[host] = description.emulation
    return found


def _cpu(description: HostDescription) -> str:
    cpu = description.cpu
    if cpu is None:
        return "—"
    return " / ".join(_known(n) for n in (cpu.sockets, cpu.cores, cpu.threads))


def _gpus(description: HostDescription) -> str:
    if description.gpus is None:
        return "unknown"
    return ", ".join(g.model for g in description.gpus) or "none"


def _suite_commit(description: HostDescription) -> str:
    suite = description.suite
    commit = (suite.commit if suite else None) or "unknown"
    return commit[:12] + (" (modified)" if suite and suite.dirty else "")


def _gpu_check(description: HostDescription) -> str:
    """The newest `inv gpucheck` on the host when it was described, and the TensorFlow it ran
    with where that is not the TensorFlow the trials ran."""
    check = description.gpu_check
    text = check_text(check)
    if check and check.tensorflow_version not in (None, description.tensorflow_version):
        text += f", with TensorFlow {check.tensorflow_version}"
    return text


# the hosts table's rows: label -> what it shows of a description
HOST_FIELDS = {
    "architecture": lambda d: d.architecture,
    "emulation": lambda d: d.emulation or "native",
    "CPU kernels": lambda d: _known(d.cpu_kernels),
    "CPU": lambda d: _known(d.cpu.model if d.cpu else None),
    "sockets / cores / threads": _cpu,
    "memory": lambda d: format_bytes(d.memory_bytes),
    "GPUs": _gpus,
    "copy GB/s at 1 MiB / 64 MiB / 1 GiB": _link_text,
    "driver / CUDA / cuDNN": lambda d: " / ".join(
        map(_known, (d.driver_version, d.cuda_version, d.cudnn_version))
    ),
    "GPU check (`inv gpucheck`)": _gpu_check,
    "TensorFlow / Keras": lambda d: f"{_known(d.tensorflow_version)} / {_known(d.keras_version)}",
    "Python": lambda d: _known(d.python_version),
    "image digest": lambda d: d.image_digest or "native",
    "suite commit": _suite_commit,
}


def _hosts_table(records: list[TrialRecord], results_dir: Path) -> str:
    refs = _newest_refs(records)
    hosts = sorted(refs)
    descriptions = {h: load_host(results_dir, refs[h]) for h in hosts}
    rows = []
    for label, getter in HOST_FIELDS.items():
        values = []
        for host in hosts:
            description = descriptions[host]
            values.append(str(getter(description)) if description else "description missing")
        differs = len(hosts) > 1 and len(set(values)) > 1
        rows.append([f"**{label}** ⚠ differs" if differs else label, *values])
    return tabulate(rows, ["", *hosts], tablefmt="github", disable_numparse=True)


def _provenance(groups: dict) -> tuple[str | None, list[str]]:
    """Per spec hash: hosts, record counts, dates, images; and what was left out of comparisons."""
    rows, left_out = [], []
    for workload, by_hash in sorted(groups.items()):
        for spec_hash, by_host in sorted(by_hash.items()):
            records = [r for h in by_host.values() for r in h.records]
            dates = sorted(r.started_at[:10] for r in records)
            images = sorted({(r.image or "native")[:19] for r in records})
            rows.append(
                [
                    workload,
                    f"`{spec_hash}`",
                    ", ".join(sorted(by_host)),
                    len(records),
                    f"{dates[0]} – {dates[-1]}",
                    ", ".join(images),
                ]
            )
            if len(by_host) == 1:
                (host,) = by_host
                left_out.append(f"`{spec_hash}` ({workload}): recorded on {host} only")
    headers = ["workload", "spec hash", "hosts", "records", "dates", "images"]
    table = tabulate(rows, headers, tablefmt="github", disable_numparse=True) if rows else None
    return table, left_out


def _regression(output_dir: Path) -> dict | None:
    """The last `inv regress` result written beside the report, as a table, if there is one."""
    from suite.reporting.regress import load_regression, table

    result = load_regression(output_dir)
    if result is None:
        return None
    return {
        "checked_at": result.checked_at,
        "tolerance": result.tolerance,
        "alpha": result.alpha,
        "regressions": len(result.regressions),
        "table": table(result.rows),
    }


def templates() -> jinja2.Environment:
    """The Markdown templates (reports/templates/): an undefined name is an error, and block
    tags leave no blank lines."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def render_report(results_dir: Path, output_dir: Path, title: str = "LMS benchmark report") -> Path:
    """Write `report.md` (and its plot) for all records under `results_dir`; return its path."""
    results_dir, output_dir = Path(results_dir), Path(output_dir)
    if not results_dir.is_dir():
        raise SuiteError(
            f"results directory {results_dir} does not exist: run `inv run` first, "
            "or give --results"
        )
    records = load_trials(results_dir)
    searches = load_searches(results_dir)
    # a search's trials are summarised in the limits table, not one section each
    groups = _group([r for r in records if r.spec.search is None])
    emulated = emulated_hosts(records, results_dir)
    sections = []
    for workload, by_hash in sorted(groups.items()):
        for spec_hash, by_host in sorted(by_hash.items()):
            params = next(iter(by_host.values())).records[-1].params
            studies = sorted(
                {f"{r.spec.name}/{r.spec.study}" for h in by_host.values() for r in h.records}
            )
            sections.append(
                {
                    "workload": workload,
                    "spec_hash": spec_hash,
                    "params": params,
                    "lms": lms_text(params.lms),
                    "budget": format_bytes(params.memory_budget_bytes)
                    if params.memory_budget_bytes
                    else None,
                    "studies": studies,
                    "table": _throughput_table(by_host, emulated),
                }
            )
    provenance, left_out = _provenance(groups)
    plot_name = "throughput.png"
    has_plot = plot_throughput(groups, output_dir / plot_name)
    template = templates().get_template("report.md.j2")
    text = template.render(
        title=title,
        generated_at=utc_now(),
        results_dir=str(results_dir),
        record_count=len(records),
        hosts=sorted({r.host for r in records}),
        emulated=emulated,
        sections=sections,
        answers=answer_tables(records, searches, emulated),
        plot=plot_name if has_plot else None,
        hosts_table=_hosts_table(records, results_dir) if records else None,
        limits_table=limits_table(searches, records),
        provenance=provenance,
        left_out=left_out,
        regression=_regression(output_dir),
        projection=projection_section(records, output_dir),
        scaling=scaling_section(records, output_dir),
        sweeps=plot_sweeps(records, output_dir),
        timelines=plot_timelines(records, output_dir),
    )
    output_dir.mkdir(parents=True, exist_ok=True)
    path = output_dir / "report.md"
    path.write_text(text)
    return path
