"""What the pipeline (lms/pipeline.py) is asked for and gives back: a `Request` for one plan, the
`Planned` it made (trace, analysis, tuned plan, splits) and the `Prepared` plan that runs.

Why apart: they are the pipeline's interface with the closed loop and `LMS`, plain values that
each says what it is; the pipeline module keeps the steps that make them.
"""

from dataclasses import dataclass

from lms.tuning.tuner import Tuned
from lms.values.parameters import Parameters
from lms.values.report import PlanReport


@dataclass(frozen=True)
class Request:
    """What one plan is asked for.

    parameters: None: the options'. budget_bytes: None: the device's budget (or, with `cached`,
    what the calibration cache holds for this step). keep_closest: a budget nothing meets in
    simulation gives the closest plan instead of NothingFitsError (the closed loop measures it).
    made: False for a plan that is only reported (`LMS.plan_only(made=False)`): split ops whose
    plan fits as modelled (lms/split/modelled.py) are not made, the report is the model's.
    """

    parameters: Parameters | None = None
    budget_bytes: int | None = None
    keep_closest: bool = False
    cached: bool = False
    made: bool = True


@dataclass(frozen=True)
class Planned:
    """A tuned plan and what it was made from.

    concrete: the step's trace (its graph edited in place by the splits); pieces: the tracker of
    the split ops' piece copies (from the mechanism); budget_bytes: what it was planned for;
    shortfall: why nothing fit in simulation, when the closest plan was kept; timings: seconds
    of trace, analysis and tuning (and, once prepared, rewrite); fingerprint: the trace's key in
    the calibration cache (None without one)."""

    concrete: object
    analysis: object
    tuned: Tuned
    splits: tuple
    pieces: object
    budget_bytes: int
    shortfall: str | None
    timings: dict
    fingerprint: str | None


@dataclass(frozen=True)
class Prepared:
    """A plan ready to run: `callable` runs the rewritten step; `report` says what was planned."""

    callable: object
    planned: Planned
    report: PlanReport

    @property
    def tuned(self) -> Tuned:
        return self.planned.tuned
