"""`inv specs`: the shipped specs, what each runs and how much of it, and which studies use LMS.

The counts are those `inv run` prints: a trial is one trial process (a configuration times its
repeats). Switch sweeps and limit searches are counted apart, since how many trials they run is
decided as they go (the sweep's switch point, the search's bracket).
"""

import textwrap

from suite.specs.loader import available_specs, load_spec
from suite.specs.model import Spec

WIDTH = 100  # the description is re-flowed to this width, whole


def _plural(count: int, noun: str, plural: str | None = None) -> str:
    return f"{count} {noun if count == 1 else plural or noun + 's'}"


def _repeats(repeats: list[int]) -> str:
    low, high = min(repeats), max(repeats)
    return f"x {_plural(low, 'repeat')}" if low == high else f"{low}-{high} repeats each"


def run_counts(spec: Spec) -> str:
    """What `inv run` runs of `spec`, e.g. "12 trials (4 configurations x 3 repeats), 4 limit
    searches (2 studies x LMS off and on; each runs as many trials as it needs)"."""
    parts = []
    if spec.trials:
        processes = sum(t.repeats for t in spec.trials)
        configurations = _plural(len(spec.trials), "configuration")
        parts.append(
            f"{_plural(processes, 'trial')} ({configurations} "
            f"{_repeats([t.repeats for t in spec.trials])})"
        )
    if spec.switch_sweeps:
        sweeps = spec.switch_sweeps
        processes = sum(len(s.resolutions) * s.repeats for s in sweeps)
        resolutions = sum(len(s.resolutions) for s in sweeps)
        parts.append(
            f"{_plural(processes, 'trial')} in {_plural(len(sweeps), 'switch sweep')} "
            f"({_plural(resolutions, 'resolution')} {_repeats([s.repeats for s in sweeps])}, "
            f"+{sum(s.repeats for s in sweeps)} where LMS becomes necessary)"
        )
    if spec.searches:
        runs = sum(len(s.modes) for s in spec.searches)
        modes = sorted({" and ".join(s.modes) for s in spec.searches})
        parts.append(
            f"{_plural(runs, 'limit search', 'limit searches')} "
            f"({_plural(len(spec.searches), 'study', 'studies')} x LMS {' or '.join(modes)}; "
            "each runs as many trials as it needs)"
        )
    return ", ".join(parts)


def describe_specs() -> list[str]:
    """Per shipped spec: its name and run counts, its whole description (wrapped), and a line per
    study saying what it runs and whether it uses LMS."""
    lines = []
    for name in available_specs():
        spec = load_spec(name)
        if lines:
            lines.append("")
        lines.append(f"{name}: {run_counts(spec)}")
        for paragraph in spec.description.split("\n\n"):
            lines += textwrap.wrap(
                " ".join(paragraph.split()),
                WIDTH,
                initial_indent="    ",
                subsequent_indent="    ",
                break_on_hyphens=False,
            )
        lines += [f"  {study}" for study in spec.study_lines()]
    return lines
