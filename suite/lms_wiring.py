"""How trials use `lms` (through its public API only): the planner for a trial's parameters."""

import lms


def lms_options(params: dict) -> dict | None:
    """Keyword arguments of lms.LMS for a trial, or None when the trial runs without LMS.

    The memory LMS plans for: the spec's lms.device_memory, else the trial's memory budget (the
    emulated device), else (None) the GPU's memory, read by lms.
    """
    settings = params.get("lms")
    if not settings:
        return None
    options = {k: v for k, v in settings.items() if k != "device_memory"}
    options["serialization"] = tuple(options.get("serialization", ()))
    options["device_memory"] = settings.get("device_memory") or params.get("memory_budget_bytes")
    options["batch_size"] = params["batch"]
    return options


def make_planner(params: dict, plot=None) -> "lms.LMS | None":
    options = lms_options(params)
    return None if options is None else lms.LMS(plot=plot, **options)
