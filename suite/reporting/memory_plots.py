"""The report's simulated memory timelines: for each LMS configuration the suite ran, the device
memory over one step without and with LMS, the host memory holding swapped tensors, and the
budget (from the plan each LMS trial records; pooled to a few hundred points, peaks kept)."""

from pathlib import Path

from suite.records import TrialRecord
from suite.reporting.lms_view import plan

GiB = 2**30


def plot_timelines(records: list[TrialRecord], output_dir: Path) -> list[dict]:
    """One PNG per spec hash with a recorded LMS timeline; [{title, file}] for the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots, seen = [], set()
    for record in sorted(records, key=lambda r: r.spec_hash):
        report = plan(record.metrics)
        timeline = report.timeline if report else None
        if not timeline or record.spec_hash in seen:
            continue
        seen.add(record.spec_hash)
        title = record.params.describe()
        figure, axis = plt.subplots(figsize=(8, 3.5))
        without = [v / GiB for v in timeline.device_bytes_without_lms]
        axis.plot(without, color="tab:red", label="device, without LMS")
        if timeline.device_bytes_with_lms:
            axis.plot(
                [v / GiB for v in timeline.device_bytes_with_lms],
                color="tab:blue",
                label="device, with LMS",
            )
        if timeline.device_bytes_with_lms and timeline.host_bytes:
            axis.plot(
                [v / GiB for v in timeline.host_bytes],
                color="tab:green",
                linestyle="--",
                label="host (swapped tensors)",
            )
        if report.budget_bytes is not None:
            budget = report.budget_bytes / GiB
            axis.axhline(budget, color="black", linestyle=":", label="LMS budget")
        axis.set_xlabel("one training step (simulated, pooled)")
        axis.set_ylabel("GiB")
        axis.set_title(f"Simulated memory: {title}")
        axis.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        name = f"memory-{record.spec_hash}.png"
        output_dir.mkdir(parents=True, exist_ok=True)
        figure.savefig(output_dir / name, dpi=100)
        plt.close(figure)
        plots.append({"title": title, "file": name, "spec_hash": record.spec_hash})
    return plots
