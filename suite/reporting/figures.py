"""The report's matplotlib plumbing in one place: a headless figure, and how it is labelled and
saved (PNG, 100 dpi, its folder made)."""

from pathlib import Path


def new_figure(size=(7, 4.2)):
    """(figure, axis) drawn without a display (the Agg backend)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size)


def finish(figure, axis, path: Path, xlabel: str, ylabel: str, title: str) -> bool:
    """Label, lay out, save as `path` and close; True (the plot exists)."""
    import matplotlib.pyplot as plt

    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return True


def discard(figure) -> bool:
    """Close a figure with nothing drawn; False (no plot)."""
    import matplotlib.pyplot as plt

    plt.close(figure)
    return False
