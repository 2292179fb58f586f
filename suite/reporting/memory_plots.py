"""The report's simulated memory timelines: for each LMS configuration the suite ran, the device
memory over one step without and with LMS, the host memory holding swapped tensors, and the
budget (from the plan each LMS trial records; pooled to a few hundred points, peaks kept)."""

from pathlib import Path

from suite.records import record_params

GiB = 2**30


def plot_timelines(records: list[dict], output_dir: Path) -> list[dict]:
    """One PNG per spec hash with a recorded LMS timeline; [{title, file}] for the report."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plots, seen = [], set()
    for record in sorted(records, key=lambda r: r["spec_hash"]):
        plan = ((record.get("metrics") or {}).get("lms")) or {}
        timeline = plan.get("timeline")
        if not timeline or record["spec_hash"] in seen:
            continue
        seen.add(record["spec_hash"])
        title = record_params(record).describe()
        figure, axis = plt.subplots(figsize=(8, 3.5))
        without = [v / GiB for v in timeline["device_bytes_without_lms"]]
        axis.plot(without, color="tab:red", label="device, without LMS")
        if timeline.get("device_bytes_with_lms"):
            axis.plot(
                [v / GiB for v in timeline["device_bytes_with_lms"]],
                color="tab:blue",
                label="device, with LMS",
            )
            axis.plot(
                [v / GiB for v in timeline["host_bytes"]],
                color="tab:green",
                linestyle="--",
                label="host (swapped tensors)",
            )
        axis.axhline(plan["budget_bytes"] / GiB, color="black", linestyle=":", label="LMS budget")
        axis.set_xlabel("one training step (simulated, pooled)")
        axis.set_ylabel("GiB")
        axis.set_title(f"Simulated memory: {title}")
        axis.legend(loc="upper left", fontsize=8)
        figure.tight_layout()
        name = f"memory-{record['spec_hash']}.png"
        output_dir.mkdir(parents=True, exist_ok=True)
        figure.savefig(output_dir / name, dpi=100)
        plt.close(figure)
        plots.append({"title": title, "file": name, "spec_hash": record["spec_hash"]})
    return plots
