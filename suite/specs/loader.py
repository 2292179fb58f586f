"""Spec files: TOML studies of workloads, validated field by field, resolved into trials.

A spec holds `name`, `description`, optional `[defaults]` and one or more `[[study]]` tables.
A study is one of:
- `throughput`: one workload at one resolution and batch;
- `sweep`: one workload, one batch, a list (or start/stop/step range) of resolutions; with
  `lms_mode = "switch"` LMS is off while the model fits and on from the first resolution where it
  does not (seed 000), with `"both"` every resolution runs with LMS off and on;
- `max-resolution` / `max-batch`: a limit search (batch or resolution fixed, the other searched
  from `start` up to `stop` in multiples of `step`), by default once with LMS off and once on
  (`lms_mode = "both" | "off" | "on"`); `suite.running.searches` runs them, and runs the boundary
  sizes in `boundary_repeats` more processes where a peak lies within `boundary_spread` of the
  memory budget.
Every trial's resolved parameters are hashed canonically (`trial_hash`): the same hash on two hosts
means the same workload, which is what reports compare.
"""

import tomllib
from pathlib import Path

from suite.errors import SuiteError
from suite.lms_seam import LMS_FIELDS
from suite.specs.fields import (
    LMS_MODES,
    NAME,
    OVERRIDABLE,
    RUNNABLE_KINDS,
    SEARCH_DEFAULTS,
    SEARCH_KINDS,
    STUDY_FIELDS,
    STUDY_KINDS,
    TRIAL_DEFAULTS,
    Checker,
)
from suite.specs.model import Search, Spec, SwitchSweep, Trial, TrialParams
from suite.workloads import PRECISIONS, WORKLOADS

SPEC_DIR = Path(__file__).parent


def available_specs() -> list[str]:
    return sorted(p.stem for p in SPEC_DIR.glob("*.toml"))


def find_spec(name_or_path: str) -> Path:
    """A spec by path, or by name among the suite's specs."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise SuiteError(f"spec file {name_or_path} does not exist")
        return path
    candidate = SPEC_DIR / f"{name_or_path}.toml"
    if not candidate.is_file():
        raise SuiteError(
            f"unknown spec {name_or_path!r}; choose one of: "
            f"{', '.join(available_specs())}, or give a path to a .toml file"
        )
    return candidate


def _resolutions(check: Checker, where: str, value, workload: str) -> list[int]:
    if isinstance(value, dict):
        check.known_keys(where, value, {"start", "stop", "step"})
        start = check.integer(f"{where}.start", value.get("start"), 1)
        stop = check.integer(f"{where}.stop", value.get("stop"), start)
        step = check.integer(f"{where}.step", value.get("step"), 1)
        value = list(range(start, stop + 1, step))
    if not isinstance(value, list) or not value:
        check.fail(where, value, "a non-empty list of resolutions or {start, stop, step}")
    for i, resolution in enumerate(value):
        check.resolution(f"{where}[{i}]", resolution, workload)
    if len(set(value)) != len(value):
        check.fail(where, value, "distinct resolutions")
    return value


def _resolve_params(check: Checker, where: str, settings: dict, workload: str) -> dict:
    resolved = {}
    for key in TRIAL_DEFAULTS:
        value = settings.get(key, TRIAL_DEFAULTS[key])
        resolved[key] = None if value is None else check.trial_field(f"{where}.{key}", key, value)
    if resolved["classes"] is None:
        resolved["classes"] = WORKLOADS[workload].default_classes
    data = resolved["data"]
    fits = WORKLOADS[workload].data_formats()
    if data["kind"] == "tfrecord" and data["format"] not in fits:
        allowed = " or ".join(repr(f) for f in fits) or "no real-data format"
        check.fail(f"{where}.data.format", data["format"], f"{allowed} for {workload}")
    return resolved


def _trial_params(workload, resolution, batch, resolved) -> TrialParams:
    return TrialParams(
        workload=workload,
        resolution=resolution,
        batch=batch,
        precision=resolved["precision"],
        classes=resolved["classes"],
        steps=resolved["steps"],
        warmup_steps=resolved["warmup_steps"],
        data=resolved["data"],
        memory_budget_bytes=resolved["memory_budget"],
        seed=resolved["seed"],
        lms=resolved["lms"] or None,
        gpus=resolved["gpus"],
        nodes=resolved["nodes"],
    )


def parse_spec(text: str, source: str, overrides: dict | None = None) -> Spec:
    """Validate and resolve a spec's TOML text; `overrides` come from the command line."""
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise SuiteError(f"{source}: not valid TOML: {error}") from error
    check = Checker(source)
    check.known_keys("", document, {"name", "description", "defaults", "study"})
    name = check.text("name", document.get("name"), NAME)
    description = document.get("description", "")
    check.text("description", description)
    defaults = document.get("defaults", {})
    check.known_keys("defaults", defaults, set(TRIAL_DEFAULTS) | set(SEARCH_DEFAULTS))
    for key, value in defaults.items():  # errors name the table the value is written in
        if key in SEARCH_DEFAULTS:
            check.search_field(f"defaults.{key}", key, value)
        else:
            check.trial_field(f"defaults.{key}", key, value)
    studies = document.get("study")
    if not isinstance(studies, list) or not studies:
        check.fail("study", studies, "one or more [[study]] tables")
    overrides = _checked_overrides(overrides or {})

    spec, seen = Spec(name, description, source), set()
    for index, study in enumerate(studies):
        where = f"study[{index}]"
        check.known_keys(
            where,
            study,
            {"name", "kind", "workload", "lms_mode"}
            | set(TRIAL_DEFAULTS)
            | set(SEARCH_DEFAULTS)
            | set().union(*STUDY_FIELDS.values()),
        )
        study_name = check.text(f"{where}.name", study.get("name"), NAME)
        if study_name in seen:
            check.fail(f"{where}.name", study_name, "a name not used by another study")
        seen.add(study_name)
        kind = check.choice(f"{where}.kind", study.get("kind"), STUDY_KINDS)
        workload = check.choice(f"{where}.workload", study.get("workload"), tuple(WORKLOADS))
        for key in set().union(*STUDY_FIELDS.values()) - STUDY_FIELDS[kind]:
            if key in study:
                check.fail(
                    f"{where}.{key}",
                    study[key],
                    f"absent in a {kind} study (it takes: {', '.join(sorted(STUDY_FIELDS[kind]))})",
                )
        for key in STUDY_FIELDS[kind]:
            if key not in study:
                check.fail(f"{where}.{key}", None, f"required in a {kind} study")
        for key in SEARCH_DEFAULTS:
            if key in study and kind not in SEARCH_KINDS:
                check.fail(
                    f"{where}.{key}",
                    study[key],
                    f"absent in a {kind} study (only {' and '.join(SEARCH_KINDS)} studies take it)",
                )
        study = _apply_overrides(study, kind, workload, overrides)
        modes, default_mode = LMS_MODES[kind]
        lms_mode = check.choice(f"{where}.lms_mode", study.get("lms_mode", default_mode), modes)
        settings = {**defaults, **{k: v for k, v in study.items() if k in TRIAL_DEFAULTS}}
        for key in ("steps", "precision"):
            if key in overrides:
                settings[key] = overrides[key]
        resolved = _resolve_params(check, where, settings, workload)
        for key, default in SEARCH_DEFAULTS.items():
            value = study.get(key, defaults.get(key, default))
            resolved[key] = check.search_field(f"{where}.{key}", key, value)
        _add_study(spec, check, where, study, study_name, kind, workload, resolved, lms_mode)
    return spec


def _add_study(spec, check, where, study, study_name, kind, workload, resolved, lms_mode):
    batch = study.get("batch")
    # what "LMS on" means where a mode turns it on: the study's `lms` table, else auto-tuned
    lms_on = resolved["lms"] or dict(LMS_FIELDS)
    if batch is not None:
        batch = check.integer(f"{where}.batch", batch, 1)
        replicas = resolved["gpus"] * resolved["nodes"]
        if resolved["batch_scope"] == "global":  # trials hold the batch per replica
            if batch % replicas:
                check.fail(
                    f"{where}.batch",
                    batch,
                    f"a multiple of the {replicas} replicas (batch_scope 'global')",
                )
            batch //= replicas
    if kind in RUNNABLE_KINDS:
        if kind == "throughput":
            resolutions = [check.resolution(f"{where}.resolution", study["resolution"], workload)]
        else:
            resolutions = _resolutions(
                check, f"{where}.resolutions", study["resolutions"], workload
            )
        repeats, timeout = resolved["repeats"], resolved["timeout"]
        if lms_mode == "switch":
            params = _trial_params(workload, None, batch, {**resolved, "lms": None})
            spec.switch_sweeps.append(
                SwitchSweep(
                    spec.name,
                    study_name,
                    params,
                    tuple(sorted(resolutions)),
                    lms_on,
                    repeats,
                    timeout,
                )
            )
            return
        for resolution in resolutions:
            params = _trial_params(workload, resolution, batch, resolved)
            if lms_mode == "both":
                params = _trial_params(workload, resolution, batch, {**resolved, "lms": None})
                for mode in ("off", "on"):
                    trial_params = params.in_mode(mode, lms_on)
                    spec.trials.append(Trial(spec.name, study_name, trial_params, repeats, timeout))
            else:
                spec.trials.append(Trial(spec.name, study_name, params, repeats, timeout))
        return
    start = check.integer(f"{where}.start", study["start"], 1)
    stop = check.integer(f"{where}.stop", study["stop"], start + 1)
    step = check.integer(f"{where}.step", study["step"], 1)
    off = {**resolved, "lms": None}
    if kind == "max-resolution":
        multiple = WORKLOADS[workload].resolution_multiple
        if step % multiple:
            check.fail(f"{where}.step", step, f"a multiple of {multiple} for {workload}")
        check.resolution(f"{where}.start", start, workload)
        params = _trial_params(workload, None, batch, off)
    else:
        resolution = check.resolution(f"{where}.resolution", study["resolution"], workload)
        params = _trial_params(workload, resolution, None, off)
    modes = ("off", "on") if lms_mode == "both" else (lms_mode,)
    spec.searches.append(
        Search(
            spec.name,
            study_name,
            kind,
            params,
            start,
            stop,
            step,
            modes,
            lms_on,
            resolved["timeout"],
            resolved["boundary_repeats"],
            resolved["boundary_spread"],
        )
    )


def _checked_overrides(overrides: dict) -> dict:
    """The command line's overrides, parsed (they arrive as text) and checked; None: not given."""
    check = Checker("command line")
    result = {}
    for key, value in overrides.items():
        if value is None:
            continue
        if key not in OVERRIDABLE:
            raise AssertionError(key)
        if key == "precision":
            result[key] = check.choice(f"--{key}", value, tuple(PRECISIONS))
            continue
        if isinstance(value, str):
            try:
                value = int(value.strip())
            except ValueError:
                check.fail(f"--{key}", value, "an integer >= 1")
        result[key] = check.integer(f"--{key}", value, 1)
    return result


def _apply_overrides(study: dict, kind: str, workload: str, overrides: dict) -> dict:
    """The study's table with the command line's resolution and batch in place, each checked
    against this study's workload as its own value would be. A search keeps its searched
    dimension (`--resolution` does not change a max-resolution search, nor `--batch` a
    max-batch one)."""
    study = dict(study)
    if "resolution" in overrides and kind != "max-resolution":
        value = Checker("command line").resolution(
            "--resolution", overrides["resolution"], workload
        )
        study["resolutions" if kind == "sweep" else "resolution"] = (
            [value] if kind == "sweep" else value
        )
    if "batch" in overrides and kind != "max-batch":
        study["batch"] = overrides["batch"]
    return study


def load_spec(name_or_path: str, overrides: dict | None = None) -> Spec:
    """Find, read, validate and resolve a spec; errors name the file and field."""
    path = find_spec(name_or_path)
    return parse_spec(path.read_text(), str(path), overrides)
