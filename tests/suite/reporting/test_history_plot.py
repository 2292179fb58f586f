"""The history's plot: its legend names every series, the runs the gate called a regression
and what changed where (the reader's only key to the vertical lines)."""

from history_cases import three_nights

from suite.reporting.history import build_history
from suite.reporting.history_plot import plot_workload


def test_the_plot_names_the_change_and_the_regression_in_its_legend(tmp_path, monkeypatch):
    import matplotlib.axes

    history = build_history(three_nights(tmp_path / "results"))
    labels = []
    legend = matplotlib.axes.Axes.legend

    def kept(axis, *args, **kwargs):
        labels.extend(axis.get_legend_handles_labels()[1])
        return legend(axis, *args, **kwargs)

    monkeypatch.setattr(matplotlib.axes.Axes, "legend", kept)
    plot_workload(history, "googlenet", tmp_path)
    assert "TensorFlow 2.21.0 → 2.22.0" in labels
    assert "regression against the run before" in labels
    assert "h1 · googlenet 64px b2 · LMS off" in labels
