"""The step-time model: one profiled step replayed with its swaps on a link of given speed.

Why a replay and not a schedule from scratch: the profile already holds what the executor did
(op order, overlap of concurrent ops, the host copies' cost); what changes with the link is only
when each swap's bytes arrive. So the model keeps the profiled timeline and inserts waits:

- every swap op (swap-out or swap-in) is a transfer. It is asked for when the profile ran it
  (shifted by the delay accumulated so far), a swap-in no sooner than its swap-out is done.
  With device copies (a GPU, two logical devices) the bytes move through the partitioner's
  send/recv pair and the profile's event of a transfer is that pair's (a GPU: the copy event),
  named by the swap (lms/observe/copy_match.py, lms/timing/profile.py `step_profile`); a profile in
  which no transfer was seen replays as the profiled step, whatever the link.
  Each direction moves one transfer at a time, in the order asked, for `latency + bytes /
  bandwidth`; a transfer is done no sooner than its profiled host copy either.
- every other op starts when the profile started it plus the accumulated delay, or when the
  last transfer it reads (data or control input) is done, whichever is later; a wait delays
  every op after it (one compute stream, as on a GPU; on the CPU's concurrent threads this is
  pessimistic, and benchmarks/link_projection.py measures by how much).
- the step ends with its last op or transfer. The profiled times can be scaled
  (`compute_scale`: a device that computes faster or slower); transfers then take the link's
  time alone, without the profiled device's host copies.

Pure functions of the profile, the swap graph and the link: no TensorFlow.
"""

from dataclasses import dataclass, field

from lms.values.link import Link


@dataclass(frozen=True)
class SwapGraph:
    """The swaps of a rewritten step, by op name: transfers {name: (direction, bytes, source)}
    (a swap-in's source is its swap-out) and gates {op name: transfers it reads}."""

    transfers: dict
    gates: dict = field(default_factory=dict)

    @property
    def bytes_per_direction(self) -> dict:
        totals = {"out": 0, "in": 0}
        for direction, nbytes, _ in self.transfers.values():
            totals[direction] += nbytes
        return totals


@dataclass(frozen=True)
class Projection:
    """A step's time on one link (`project`)."""

    step_seconds: float  # projected step time
    compute_seconds: float  # the step with transfers that never wait (the link infinitely fast)
    busy_out: float  # seconds the device-to-host direction moves bytes in the step
    busy_in: float
    waits: int  # ops that waited for a transfer

    @property
    def stall_seconds(self) -> float:
        return self.step_seconds - self.compute_seconds

    def to_dict(self) -> dict:
        return {
            "step_seconds": self.step_seconds,
            "compute_seconds": self.compute_seconds,
            "busy_out": self.busy_out,
            "busy_in": self.busy_in,
            "waits": self.waits,
        }

    @classmethod
    def from_dict(cls, data: dict) -> "Projection":
        return cls(
            data["step_seconds"],
            data["compute_seconds"],
            data["busy_out"],
            data["busy_in"],
            data["waits"],
        )


def _replay(profile, swaps: SwapGraph, link: Link, scale: float, host_copies: bool):
    """(end of the step, seconds each direction is busy, ops that waited) with every profiled
    time multiplied by `scale`. A gated op may start as much before its transfer is done as
    it did in the profile: profiled events end a little after the op's output is usable (the
    executor's bookkeeping, timestamps of two threads), and that is not a wait for the link."""
    shift, free = 0.0, {"out": 0.0, "in": 0.0}
    busy = {"out": 0.0, "in": 0.0}
    done, profiled_end, end, waits = {}, {}, 0.0, 0
    for event in profile.ops:
        start, duration = event.start * scale, event.duration * scale
        transfer = swaps.transfers.get(event.name)
        if transfer is not None:
            direction, nbytes, source = transfer
            asked = start + shift
            if source in done:
                asked = max(asked, done[source] - max(0.0, profiled_end[source] - start))
            seconds = link.seconds(nbytes, direction)
            free[direction] = max(asked, free[direction]) + seconds
            busy[direction] += seconds
            done[event.name] = max(free[direction], asked + (duration if host_copies else 0))
            profiled_end[event.name] = start + duration
            end = max(end, done[event.name])
            continue
        begins = start + shift
        ready = max(
            (
                done[g] - max(0.0, profiled_end[g] - start)
                for g in swaps.gates.get(event.name, ())
                if g in done
            ),
            default=0.0,
        )
        if ready > begins:
            shift += ready - begins
            begins, waits = ready, waits + 1
        end = max(end, begins + duration)
    return end, busy, waits


def project(
    profile,
    swaps: SwapGraph,
    link: Link | None,
    step_seconds: float | None = None,
    compute_scale: float = 1.0,
) -> Projection:
    """The step time with `swaps` on `link` (None: transfers as fast as the profile's host
    copies). `step_seconds`, a step time measured without the profiler, rescales the profile's
    timeline to it (the profiler slows a step down); `compute_scale` multiplies compute times
    (0.1: a device ten times faster)."""
    makespan = profile.makespan
    scale = (step_seconds / makespan if step_seconds and makespan else 1.0) * compute_scale
    host_copies = compute_scale == 1.0  # the profiled device's own copies bound its transfers
    compute = makespan * scale  # the profile as it ran: every transfer as fast as it was
    if link is None:
        return Projection(compute, compute, 0.0, 0.0, 0)
    total, busy, waits = _replay(profile, swaps, link, scale, host_copies)
    return Projection(max(total, compute), compute, busy["out"], busy["in"], waits)


def seen_transfers(profile, swaps: SwapGraph) -> list:
    """The transfers of `swaps` that have an event in `profile`, by name: those the replay moves
    on the link (any other is not seen, and its readers never wait)."""
    names = {event.name for event in profile.ops}
    return sorted(name for name in swaps.transfers if name in names)
