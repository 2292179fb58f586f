"""The one seam between the suite and `lms`: what a trial's `lms` table means to the library.

Only `lms`'s public names are used. Importing `lms` costs no TensorFlow until a planner is made,
so loading and checking a spec stays light (a trial's parent process never holds TensorFlow).
"""

from typing import Protocol

import lms

# What an `lms` table may hold: lms.LMS's parameters (-1 auto-tunes) and the memory it plans for,
# with lms.Options' defaults (the order and the list are the hashed form's).
LMS_FIELDS = {
    "swapout_threshold": lms.Options.swapout_threshold,
    "swapin_ahead": lms.Options.swapin_ahead,
    "swapin_groupby": lms.Options.swapin_groupby,
    "sync_mode": lms.Options.sync_mode,
    "serialization": [],
    "serialization_by_size": lms.Options.serialization_by_size,
    "device_memory": None,  # default: the trial's memory_budget, or the GPU's memory
    "safety_ratio": lms.Options.safety_ratio,  # of the memory the plan may fill
}
# Accepted in an `lms` table but resolved (and hashed) only when given, so that the hashes of
# LMS trials recorded before the field existed still match: lms's default applies. `link`
# (emulated device only) is {bandwidth = "16GB/s", latency = "10us"}, hashed in bytes/s and s;
# `split` is "auto", "off" or {op type or name = pieces} (lms.Options.split); not given, the
# suite runs LMS with "off" (swapping alone) although lms's own default is "auto": a recorded
# trial's hash keeps meaning what it ran (no trial before issue 31 split), and the limits
# table shows splitting's reach beside swapping's (a spec asks for it: split = "auto").
# `host_memory` ("64GiB", hashed in bytes) is the host memory lms checks a plan against before
# its step runs (lms.Options.host_memory; not given: what the host has available then).
OPTIONAL_LMS_FIELDS = ("ordering", "link", "split", "host_memory")
SUITE_SPLIT_DEFAULT = "off"


def check_lms_table(table: dict) -> dict:
    """`table` (an `lms` table of a spec) resolved with the defaults and checked by lms itself;
    raises lms.ParameterError, whose message names the parameter."""
    resolved = {**LMS_FIELDS, **table}
    for name in ("device_memory", "host_memory"):
        if resolved.get(name) is not None:
            resolved[name] = lms.parse_size(resolved[name], name)
    if resolved.get("link") is not None:  # one spelling per link: "16GB/s" and 16e9 hash alike
        link = lms.Link.of(resolved["link"]).as_dict()  # 12 digits: "10us" is 10 * 1e-6 = 1e-5
        resolved["link"] = {key: float(f"{value:.12g}") for key, value in link.items()}
    lms.check_options(**{k: v for k, v in resolved.items() if v is not None})
    return resolved


def link_text(link: dict) -> str:
    """An `lms.link` table as "16 GB/s, 10 us"."""
    return lms.Link.of(link).describe()


class LMSTrial(Protocol):
    """What the seam reads of a trial's parameters. The seam sits below the specs: it is handed
    their `TrialParams` (suite/specs/model.py), which has these fields, and never imports them."""

    @property
    def lms(self) -> dict | None:
        """The resolved `lms` table (check_lms_table); None: LMS off."""

    @property
    def memory_budget_bytes(self) -> int | None:
        """The emulated device's memory; None: the device's own."""

    @property
    def batch(self) -> int | None: ...


def device_memory(params: LMSTrial) -> int | None:
    """The memory of a trial's device, which LMS plans for and the simulator checks against:
    the spec's lms.device_memory, else the trial's memory budget (the emulated device), else
    None: the GPU's, which lms reads."""
    settings = params.lms or {}
    return settings.get("device_memory") or params.memory_budget_bytes


def lms_options(params: LMSTrial, host_disk=None) -> dict | None:
    """Keyword arguments of lms.LMS for a trial, or None when the trial runs without LMS.
    `host_disk`: the directory the host lends the host store (`inv run --host-disk`; emulated
    device only), a place of the host and not a parameter of the trial: never in its `lms`
    table, so never in its hash."""
    settings = params.lms
    if not settings:
        return None
    options = {k: v for k, v in settings.items() if k != "device_memory"}
    options["serialization"] = tuple(options.get("serialization", ()))
    options.setdefault("split", SUITE_SPLIT_DEFAULT)
    options["device_memory"] = device_memory(params)
    options["batch_size"] = params.batch
    if host_disk is not None:
        options["host_disk"] = str(host_disk)
    return options


# planning for a host other than this one without its memory: said once per task
HOST_NOT_CHECKED = "host memory not checked: planning for another host; give --host-memory to check"


def host_memory_limit(params: LMSTrial, given: int | None, here: bool):
    """The host memory a trial's plan is checked against: `given` (a task's --host-memory), else
    the spec's lms.host_memory, else, for a plan of this host ("here"), "auto" (what this host
    has available: lms.check_host_memory); for another host None, not checked: this machine's
    free memory says nothing about that host's."""
    if given is not None:
        return given
    spec_limit = (params.lms or {}).get("host_memory")
    if spec_limit is not None:
        return spec_limit
    return "auto" if here else None


def host_memory_shortfall(
    report: "lms.PlanReport", limit, emulated: bool, pinned: int | None = None, disk=None
) -> str | None:
    """Why the host cannot hold a planned trial (`report`: its plan), or None when it can or
    `limit` is None (not checked): the check lms makes before the trial's step runs
    (lms.check_host_memory: bytes, or "auto" for this host's), made on a plan that does not run.
    `emulated`: the device's buffers are host memory too; `pinned`: a GPU host's pinned
    allocator cap (the planner's `target.pinned_host_bytes()`); `disk`: the directory the host
    lends the emulated device's host store (`inv search --host-disk`), whose free space takes
    what the memory cannot."""
    if limit is None:
        return None
    disk = disk if emulated else None  # a GPU's host arrays have no disk tier
    try:
        lms.check_host_memory(
            report.host_peak_bytes, report.peak_bytes_with_lms, emulated, limit, pinned, disk
        )
    except lms.HostMemoryError as error:
        return str(error)
    return None


def make_planner(params: LMSTrial, plot=None, host_disk=None) -> "lms.LMS | None":
    """The trial's lms.LMS (None: LMS off), with the disk its host lends (`lms_options`)."""
    options = lms_options(params, host_disk)
    return None if options is None else lms.LMS(plot=plot, **options)
