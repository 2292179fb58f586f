"""A trial record's metrics: what one trial process measured, each a typed field (None: not
measured). Stored as the sparse table schema 1 had: only what was measured, `lms` on disk for
`lms_plan`. lms's plan report, swap traffic and disk usage are lms's own types (lms.PlanReport,
lms.SwapTraffic, lms.DiskUsage), read with their `from_dict`, which knows every form lms ever
wrote, and checked against their annotations here, where the file is read: the report trusts
their types."""

import dataclasses
from dataclasses import dataclass, field

import lms
from suite.records.fields import Table, check_loaded, fields_of, read_fields

# how a trial ended: it trained, ran out of (emulated) device memory, died, or did not finish
# skipped: the host lacks what the trial needs (e.g. 4 GPUs), said in the record's error
OUTCOMES = ("ok", "out_of_memory", "crashed", "timed_out", "skipped")


@dataclass(frozen=True)
class Rate:
    """A rate over a trial's timed steps (suite.stats.summarize_rates), items per second."""

    SPARSE = True
    mean: float
    stderr: float
    jitter: float | None = None
    total: float | None = None


@dataclass(frozen=True)
class StepTimes:
    median: float
    min: float
    max: float


@dataclass(frozen=True)
class Spread:
    """Mean and max of samples (of a machine load)."""

    mean: float
    max: float


@dataclass(frozen=True)
class MachineLoad:
    """What the machine and other processes took of its cores while the steps ran
    (suite.running.machine_load): cores, load average before/after, busy and others' cores."""

    SPARSE = True
    cores: int
    other_cores: Spread
    busy_cores: Spread | None = None
    load_average_1m: dict | None = None  # {"before", "after"}: numbers, or null unreadable
    seconds: float | None = None


@dataclass(frozen=True)
class MachineSpeed:
    """Runs/s of a fixed product chain before and after the steps (training.machine_speed)."""

    before: float
    after: float
    mean: float


@dataclass(frozen=True)
class Placement:
    """Where a trial process ran: the machine's host name; under Slurm its node's name
    (SLURMD_NODENAME) and index in the job (SLURM_NODEID); a replica worker's TensorFlow
    server address (address:port)."""

    SPARSE = True
    hostname: str
    node: str | None = None
    node_id: int | None = None
    address: str | None = None

    def text(self) -> str:
        """ "node2 (host vm, 127.0.0.1:20129)", "vm" when not under Slurm."""
        where = [f"host {self.hostname}"] if self.node else []
        where += [self.address] if self.address else []
        name = self.node or self.hostname
        return f"{name} ({', '.join(where)})" if where else name


@dataclass(frozen=True)
class WorkerSummary:
    """One replica worker of a data-parallel trial (suite.running.replicas.merge)."""

    outcome: str = field(metadata={"choices": OUTCOMES})
    error: str | None = None
    step_time_s: float | None = None  # its median step
    peak_memory_bytes: int | None = None
    final_loss: float | None = None
    # absent from records before 0.17, and written only when known
    placement: Placement | None = field(default=None, metadata={"sparse": True})


def _lms_type(cls, nullable: bool = False):
    """A field reader for one of lms's report types: the stored table through `cls.from_dict`,
    and what that made checked against `cls`'s annotations (`check_loaded`; `nullable`: lms
    reads a key an older record lacks as None), so that the report reads lms's fields as their
    types say; a table it cannot read is a damaged record naming the field."""

    def read(t: Table, key: str, null: bool, default):
        table = t.table(key, null, default)
        if table is None:
            return None
        try:
            value = cls.from_dict(table.values)
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            problem = f"is not lms's {cls.__name__} ({type(error).__name__}: {error})"
            raise t.damaged(key, problem) from None
        return check_loaded(value, t, key, nullable)

    return read


RATE_KEYS = ("images_per_sec", "images_per_sec_per_replica", "pixels_per_sec", "voxels_per_sec")


@dataclass(frozen=True)
class Metrics:
    """What a trial measured; None where it was not (a trial that did not train has memory and
    load only, a Slurm job that never started its job id). `lms_plan`, `lms_traffic` and
    `lms_disk` are lms's plan report, swap traffic and disk usage, as lms gives them (its
    types)."""

    SPARSE = True
    images_per_sec: Rate | None = None
    images_per_sec_per_replica: Rate | None = None
    pixels_per_sec: Rate | None = None
    voxels_per_sec: Rate | None = None
    step_time_s: StepTimes | None = None
    step_times_s: tuple[float, ...] | None = None
    warmup_times_s: tuple[float, ...] | None = None
    build_s: float | None = None
    final_loss: float | None = None
    peak_memory_bytes: int | None = None
    memory_budget_bytes: int | None = None
    machine_load: MachineLoad | None = None
    machine_speed: MachineSpeed | None = None
    replicas: int | None = None
    nodes: int | None = None
    workers: tuple[WorkerSummary, ...] | None = None
    lms_plan: lms.PlanReport | None = field(
        default=None, metadata={"key": "lms", "read": _lms_type(lms.PlanReport, nullable=True)}
    )  # LMS.report: the plan beside the measured peak
    lms_traffic: lms.SwapTraffic | None = field(
        default=None, metadata={"read": _lms_type(lms.SwapTraffic)}
    )  # lms.LMSFunction.traffic()
    # lms.LMS.disk_usage(): the disk the host lent LMS's host store (inv run --host-disk), the
    # most it held and its measured speed; absent from records before it, and without a disk
    lms_disk: lms.DiskUsage | None = field(
        default=None, metadata={"read": _lms_type(lms.DiskUsage)}
    )
    slurm_job: str | None = None  # the Slurm job that ran it
    placement: Placement | None = None  # where it ran (a replica: worker 0's place)

    def rate(self, key: str) -> Rate | None:
        """The rate named `key` (a workload's `rate_key`: pixels_per_sec or voxels_per_sec)."""
        if key not in RATE_KEYS:
            raise KeyError(f"{key!r} is not a rate; rates: {', '.join(RATE_KEYS)}")
        return getattr(self, key)

    def to_dict(self) -> dict:
        return fields_of(self)

    @classmethod
    def from_table(cls, t: Table) -> "Metrics":
        """Read and checked; a key this suite does not know is refused (a misspelt metric
        would read as not measured)."""
        known = {f.metadata.get("key", f.name) for f in dataclasses.fields(cls)}
        unknown = sorted(set(t.values) - known)
        if unknown:
            raise t.damaged(unknown[0], "is not a metric this suite knows")
        return read_fields(cls, t)
