"""The boundary search behind limit searches: the largest candidate that passes, by few probes.

Candidates are ordered so that passing is monotone (a size that trains implies every smaller one
does). The search starts at a predicted index (the simulator's answer), checks its neighbour to
confirm, and gallops (1, 2, 4, ... candidates) away from the prediction until the boundary is
bracketed, then bisects. With a right prediction that is 2 probes; a prediction k candidates off
costs about 2·log2(k) more. A probe that is not a pass (out of memory, crash, time-out) is a
boundary, not an error.
"""

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Bracket:
    """`passed` is the largest index that passed (-1: none), `failed` the smallest that did not
    (`count`: none did, up to the last candidate)."""

    count: int
    passed: int = -1
    failed: int = -1
    probes: list = field(default_factory=list)  # (index, passed) in probing order

    def __post_init__(self):
        self.failed = self.count

    @property
    def settled(self) -> bool:
        return self.failed - self.passed <= 1

    def remaining_probes(self) -> int:
        """A rough count of the probes still needed (for ETAs)."""
        if self.settled:
            return 0
        gap = self.failed - self.passed - 1
        return max(1, gap.bit_length()) if self.passed >= 0 or self.failed < self.count else 2


def bracket_search(
    count: int,
    probe: Callable[[int], bool],
    predicted: int | None = None,
    on_probe: Callable[[Bracket, int], None] | None = None,
) -> Bracket:
    """Find the boundary among `count` candidates; `probe(i)` says whether candidate i passes.

    `predicted` is the index expected to be the largest pass (-1: nothing passes; None: unknown,
    start at the first candidate). `on_probe(bracket, index)` is called before each probe.
    """
    if count < 1:
        raise ValueError("no candidates")
    bracket = Bracket(count)

    def check(index: int) -> bool:
        if on_probe:
            on_probe(bracket, index)
        passed = bool(probe(index))
        bracket.probes.append((index, passed))
        if passed:
            bracket.passed = max(bracket.passed, index)
        else:
            bracket.failed = min(bracket.failed, index)
        return passed

    start = 0 if predicted is None else min(max(predicted, 0), count - 1)
    if check(start):  # gallop upwards
        step = 1
        while not bracket.settled and bracket.passed + step < bracket.failed:
            if not check(bracket.passed + step):
                break
            step *= 2
    else:  # gallop downwards
        step = 1
        while not bracket.settled and bracket.failed - step > bracket.passed:
            if check(bracket.failed - step):
                break
            step *= 2
    while not bracket.settled:  # bisect
        check((bracket.passed + bracket.failed) // 2)
    return bracket
