"""What a spec may say, field by field, and the checks that say what is wrong with a value: the
file (or "command line"), the field, the value and what is allowed, in one SpecError."""

import re

import lms
from suite.errors import SpecError
from suite.lms_seam import LMS_FIELDS, OPTIONAL_LMS_FIELDS, check_lms_table
from suite.workloads import DATA_FORMATS, PRECISIONS, WORKLOADS

STUDY_KINDS = ("throughput", "sweep", "max-resolution", "max-batch")
RUNNABLE_KINDS = ("throughput", "sweep")
NAME = re.compile(r"^[a-z0-9][a-z0-9_-]*$")

# Fields a study may set, or inherit from [defaults], with their defaults.
TRIAL_DEFAULTS = {
    "precision": "fp32",
    "steps": 100,
    "warmup_steps": 10,  # tf_cnn_benchmarks excludes at least 10
    "repeats": 1,
    "classes": None,  # None: the workload's own number of classes
    "data": "synthetic",
    "timeout": 3600,  # seconds per trial process
    "memory_budget": None,  # emulated device: peak above this is out-of-memory
    "seed": 0,
    "lms": False,  # false, true (auto-tuned), or a table of LMS parameters
    "gpus": 1,  # devices per node: data-parallel replicas, one worker process each
    "nodes": 1,
    "batch_scope": "replica",  # `batch` per replica (global = batch x replicas), or "global"
}
# Fields a limit search (max-resolution, max-batch) may set, or inherit from [defaults]: how its
# boundary is confirmed (suite.running.boundary). Not hashed, like `repeats`: they decide how many
# processes run, not what one measures.
SEARCH_DEFAULTS = {
    # fresh processes added at the largest size that trained and at the smallest that did not,
    # when a peak lies within the spread of the budget (0: never; such a limit is "uncertain")
    "boundary_repeats": 2,
    # a measured peak's spread between processes, relative to the peak: GoogLeNet's peaks spread
    # over 5-9 % of themselves between processes here (suite.running.boundary)
    "boundary_spread": 0.10,
}
SEARCH_KINDS = ("max-resolution", "max-batch")
STUDY_FIELDS = {  # required
    "throughput": {"resolution", "batch"},
    "sweep": {"batch", "resolutions"},
    "max-resolution": {"batch", "start", "stop", "step"},
    "max-batch": {"resolution", "start", "stop", "step"},
}
# study kind -> (allowed lms_mode values, default). "fixed": the `lms` field as written.
LMS_MODES = {
    "throughput": (("fixed", "both"), "fixed"),
    "sweep": (("fixed", "switch", "both"), "fixed"),
    "max-resolution": (("both", "off", "on"), "both"),
    "max-batch": (("both", "off", "on"), "both"),
}
OVERRIDABLE = ("resolution", "batch", "steps", "precision")


class Checker:
    """Validates values of one source (a file or the command line), naming the field on error."""

    def __init__(self, source: str):
        self.source = source

    def fail(self, field_name, value, allowed):
        raise SpecError(self.source, field_name, value, allowed)

    def integer(self, name, value, minimum):
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            self.fail(name, value, f"an integer >= {minimum}")
        return value

    def choice(self, name, value, choices):
        if value not in choices:
            self.fail(name, value, "one of " + ", ".join(repr(c) for c in choices))
        return value

    def text(self, name, value, pattern=None):
        if not isinstance(value, str) or (pattern and not pattern.match(value)):
            self.fail(
                name, value, "lowercase letters, digits, '-' and '_'" if pattern else "a string"
            )
        return value

    def known_keys(self, where, table, allowed):
        if not isinstance(table, dict):
            self.fail(where, table, "a table")
        for key, value in table.items():
            if key not in allowed:
                self.fail(
                    f"{where}.{key}" if where else key,
                    value,
                    "a known field: " + ", ".join(sorted(allowed)),
                )

    def resolution(self, name, value, workload):
        self.integer(name, value, 1)
        problem = WORKLOADS[workload].check_resolution(value)
        if problem:
            self.fail(name, value, problem)
        return value

    def trial_field(self, name, key, value):
        """Validate one TRIAL_DEFAULTS field; returns its resolved form."""
        if key == "precision":
            return self.choice(name, value, tuple(PRECISIONS))
        if key in ("steps", "repeats", "gpus", "nodes"):
            return self.integer(name, value, 1)
        if key == "batch_scope":
            return self.choice(name, value, ("replica", "global"))
        if key in ("warmup_steps", "seed"):
            return self.integer(name, value, 0)
        if key == "classes":
            return self.integer(name, value, 2)
        if key == "timeout":
            if not isinstance(value, int | float) or isinstance(value, bool) or value <= 0:
                self.fail(name, value, "a number of seconds > 0")
            return value
        if key == "memory_budget":
            return self.size(name, value)
        if key == "data":
            return self.data(name, value)
        if key == "lms":
            return self.lms(name, value)
        raise AssertionError(key)

    def search_field(self, name, key, value):
        """Validate one SEARCH_DEFAULTS field; returns it."""
        if key == "boundary_repeats":
            return self.integer(name, value, 0)
        if key == "boundary_spread":
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or not 0 <= value < 1:
                self.fail(name, value, "a fraction of the peak in [0, 1), e.g. 0.1")
            return float(value)
        raise AssertionError(key)

    def lms(self, name, value):
        """None when off; else every LMS parameter, checked by lms itself."""
        if value is False:
            return None
        if value is True:
            value = {}
        if not isinstance(value, dict):
            self.fail(name, value, "false, true, or a table of LMS parameters")
        if "host_disk" in value:  # lms's option, but a place of the host, not of the trial
            allowed = "nothing here: a disk is the host's, given to inv run --host-disk DIR"
            self.fail(f"{name}.host_disk", value["host_disk"], allowed)
        self.known_keys(name, value, set(LMS_FIELDS) | set(OPTIONAL_LMS_FIELDS))
        try:
            return check_lms_table(value)
        except (lms.ParameterError, TypeError) as error:
            fields = (*LMS_FIELDS, *OPTIONAL_LMS_FIELDS)
            key = next((k for k in fields if str(error).startswith(k)), None)
            key = key or next((k for k in fields if k in str(error)), None)
            shown = value.get(key) if key else value
            self.fail(f"{name}.{key}" if key else name, shown, str(error))

    def size(self, name, value):
        try:
            return lms.parse_size(value, name)
        except lms.ParameterError as error:
            allowed = "a size like 16GiB, 512MiB or an integer number of bytes"
            if error.hint:  # a size without its unit
                allowed = f"a size with its unit, e.g. {error.hint}"
            self.fail(name, value, allowed)

    def data(self, name, value):
        if value == "synthetic":
            return {"kind": "synthetic"}
        if not isinstance(value, dict):
            self.fail(name, value, "'synthetic' or a table {format = 'imagenet'|'voc', path = ...}")
        self.known_keys(name, value, {"format", "path"})
        fmt = self.choice(f"{name}.format", value.get("format"), tuple(DATA_FORMATS))
        path = self.text(f"{name}.path", value.get("path"))
        return {"kind": "tfrecord", "format": fmt, "path": path}
