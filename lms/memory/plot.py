"""PNG of the simulated memory over one step, with and without LMS (TFLMSv2's "simulated GPU
memory usage graphs"): device GiB and host GiB per step, the budget as a line."""

from lms.graph.step import GiB


def plot_simulation(tuned, budget_bytes: int, path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(9, 4.5))
    axis.plot(tuned.baseline.device / GiB, label="device, without LMS", color="tab:red")
    if tuned.plan is not None:
        axis.plot(tuned.simulation.device / GiB, label="device, with LMS", color="tab:blue")
        axis.plot(
            tuned.simulation.host / GiB,
            label="host (swapped tensors)",
            color="tab:green",
            linestyle="--",
        )
    axis.axhline(budget_bytes / GiB, color="black", linestyle=":", label="budget")
    axis.set_xlabel("op of the simulated schedule (execution order)")
    axis.set_ylabel("GiB")
    axis.set_title("Simulated memory over one training step")
    axis.legend(loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return str(path)
