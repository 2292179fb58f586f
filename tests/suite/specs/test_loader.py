"""Spec validation: every field's error names file, field, value and what is allowed."""

import subprocess
import sys
from pathlib import Path

import pytest
from spec_cases import BASE, spec_with

from suite.errors import SpecError, SuiteError
from suite.specs import available_specs, load_spec, parse_spec

ROOT = Path(__file__).resolve().parents[3]


def test_shipped_specs_load():
    names = available_specs()
    assert {
        "smoke",
        "googlenet-enlarged",
        "deeplab-v3plus",
        "resnet50-sweep",
        "unet3d-sweep",
    } <= set(names)
    for name in names:
        assert load_spec(name).plannable_trials()


TFLMSV2_EVERYTHING = {
    "swapout_threshold": 1,
    "swapin_ahead": 1,
    "swapin_groupby": 0,
    "sync_mode": 0,
}


def _lms_levers(settings):
    return {k: settings[k] for k in TFLMSV2_EVERYTHING}


def test_seed_parameters():
    """The seeds as they ran: GoogLeNet enlarged with LMS swapping everything (and auto-tuned),
    DeepLabV3+ with TFLMSv2's 1/1/0/0 for the sweep and LMS off and on in its searches."""
    googlenet = load_spec("googlenet-enlarged").trials
    everything, auto, everything_4, auto_4 = googlenet
    # the seeds' 1 and 4 GPUs: batch 15 per GPU, one worker process each
    assert [t.params.gpus for t in googlenet] == [1, 1, 4, 4]
    assert everything_4.params.global_batch == 60
    assert everything_4.params.replace(gpus=1).hash == everything.hash
    # DeepLab's batch 16 is global, split over 4 and 8 GPUs
    deeplab_trials = load_spec("deeplab-v3plus").trials
    per_gpu = {(t.params.gpus, t.params.batch, t.params.global_batch) for t in deeplab_trials}
    assert per_gpu == {(1, 16, 16), (4, 4, 16), (8, 2, 16)}
    for trial in (everything, auto):
        p = trial.params
        assert (p.resolution, p.batch, p.precision, p.steps, p.classes) == (
            2240,
            15,
            "fp16",
            500,
            1001,
        )
    assert _lms_levers(everything.params.lms) == TFLMSV2_EVERYTHING
    assert _lms_levers(auto.params.lms) == {
        **TFLMSV2_EVERYTHING,
        "swapout_threshold": -1,
        "swapin_ahead": -1,
        "swapin_groupby": -1,
    }
    deeplab = load_spec("deeplab-v3plus")
    assert {t.params.global_batch for t in deeplab.trials} == {16}
    assert {t.params.steps for t in deeplab.trials} == {1000}
    assert all(_lms_levers(t.params.lms) == TFLMSV2_EVERYTHING for t in deeplab.trials)
    kinds = {s.kind: s for s in deeplab.searches}
    assert kinds["max-resolution"].params.batch == 1
    assert kinds["max-batch"].params.resolution == 1400
    for search in deeplab.searches:
        assert search.modes == ("off", "on") and _lms_levers(search.lms) == TFLMSV2_EVERYTHING


def test_the_embedded_default_is_the_mission_at_cpu_size():
    """smoke: GoogLeNet and DeepLabV3+, throughput LMS off and on at one size under a memory
    budget, three processes each; GoogLeNet's max-resolution and max-batch searches LMS off and
    on under that budget."""
    smoke = load_spec("smoke")
    assert {t.params.workload for t in smoke.trials} == {"googlenet", "deeplabv3plus"}
    for workload in ("googlenet", "deeplabv3plus"):
        trials = [t for t in smoke.trials if t.params.workload == workload]
        assert sorted(bool(t.params.lms) for t in trials) == [False, True]
        assert len({t.params.replace(lms=None).hash for t in trials}) == 1
        assert {t.repeats for t in trials} == {3} and trials[0].params.memory_budget_bytes
    searches = [s for s in smoke.searches if s.params.workload == "googlenet"]
    assert (
        sorted(s.kind for s in searches)
        == ["max-batch", "max-resolution"]
        == sorted(s.kind for s in smoke.searches)
    )
    budgets = {s.params.memory_budget_bytes for s in searches}
    budgets |= {
        t.params.memory_budget_bytes for t in smoke.trials if t.params.workload == "googlenet"
    }
    assert len(budgets) == 1 and all(s.modes == ("off", "on") for s in searches)


@pytest.mark.parametrize(
    "text, field, allowed",
    [
        (spec_with(top_extra="bogus = 1"), "bogus", "a known field"),
        (BASE.replace('name = "t"', 'name = "Bad Name"'), "name", "lowercase"),
        (spec_with(defaults_extra='precision = "fp8"'), "defaults.precision", "'fp32'"),
        (BASE.replace("steps = 5", "steps = 0"), "defaults.steps", "integer >= 1"),
        (spec_with(defaults_extra="warmup_steps = -1"), "defaults.warmup_steps", ">= 0"),
        (spec_with(defaults_extra="repeats = 0"), "defaults.repeats", ">= 1"),
        (spec_with(defaults_extra="classes = 1"), "defaults.classes", ">= 2"),
        (spec_with(defaults_extra="seed = 1.5"), "defaults.seed", "integer"),
        (spec_with(defaults_extra="timeout = -3"), "defaults.timeout", "seconds > 0"),
        (spec_with(defaults_extra='memory_budget = "lots"'), "defaults.memory_budget", "16GiB"),
        (spec_with(defaults_extra='data = "random"'), "defaults.data", "'synthetic'"),
        (
            spec_with(defaults_extra='data = {format = "coco", path = "x"}'),
            "defaults.data.format",
            "'imagenet'",
        ),
        (
            spec_with(defaults_extra='data = {format = "voc", path = "x"}'),
            "study[0].data.format",
            "'imagenet' for googlenet",
        ),
        (
            spec_with(defaults_extra='data = {format = "imagenet"}'),
            "defaults.data.path",
            "a string",
        ),
        (spec_with(defaults_extra="flops = 3"), "defaults.flops", "a known field"),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "throughput"\nworkload = "unet3d"\n'
            'batch = 1\nresolution = 16\ndata = {format = "voc", path = "x"}\n',
            "study[0].data.format",
            "no real-data format for unet3d",
        ),
        (spec_with(defaults_extra='lms = "yes"'), "defaults.lms", "false, true, or a table"),
        (
            spec_with(defaults_extra="lms = {threshold = 1}"),
            "defaults.lms.threshold",
            "a known field",
        ),
        (
            spec_with(defaults_extra="lms = {sync_mode = 7}"),
            "defaults.lms.sync_mode",
            "sync_mode must be 0, 1, 2 or 3",
        ),
        (
            spec_with(defaults_extra="lms = {swapout_threshold = 0}"),
            "defaults.lms.swapout_threshold",
            ">= 1 or -1 (auto-tune)",
        ),
        (
            spec_with(defaults_extra="lms = {ordering = 3}"),
            "defaults.lms.ordering",
            "ordering must be 0 (free), 1 (depth-first) or -1",
        ),
        (
            spec_with(defaults_extra='lms = {device_memory = "big"}'),
            "defaults.lms.device_memory",
            "16GiB",
        ),
        (
            spec_with(defaults_extra='lms = {link = {bandwidth = "fast"}}'),
            "defaults.lms.link",
            "a bandwidth like '16GB/s'",
        ),
        (
            spec_with(defaults_extra="lms = {safety_ratio = 1.5}"),
            "defaults.lms.safety_ratio",
            "(0, 1]",
        ),
        (  # lms takes it, but a disk is the host's (inv run --host-disk), not in a trial's hash
            spec_with(defaults_extra='lms = {host_disk = "/scratch"}'),
            "defaults.lms.host_disk",
            "nothing here: a disk is the host's, given to inv run --host-disk DIR",
        ),
        (spec_with(defaults_extra="gpus = 0"), "defaults.gpus", "an integer >= 1"),
        (spec_with(defaults_extra="boundary_repeats = -1"), "defaults.boundary_repeats", ">= 0"),
        (
            spec_with(defaults_extra="boundary_spread = 1.5"),
            "defaults.boundary_spread",
            "a fraction of the peak in [0, 1)",
        ),
        (
            spec_with(defaults_extra='boundary_spread = "10%"'),
            "defaults.boundary_spread",
            "[0, 1)",
        ),
        (
            BASE + "boundary_repeats = 2\n",
            "study[0].boundary_repeats",
            "absent in a throughput study (only max-resolution and max-batch studies take it)",
        ),
        (
            spec_with(defaults_extra='gpus = 4\nbatch_scope = "global"'),
            "study[0].batch",
            "a multiple of the 4 replicas",
        ),
        (spec_with(defaults_extra='batch_scope = "node"'), "defaults.batch_scope", "'global'"),
        (BASE.replace('kind = "throughput"', 'kind = "fastest"'), "study[0].kind", "'sweep'"),
        (
            BASE.replace('workload = "googlenet"', 'workload = "vgg"'),
            "study[0].workload",
            "'resnet50'",
        ),
        (BASE.replace("resolution = 64", "resolution = 16"), "study[0].resolution", "at least 32"),
        (BASE.replace("batch = 2", "batch = 0"), "study[0].batch", ">= 1"),
        (BASE + "steps = 0\n", "study[0].steps", ">= 1"),
        (BASE.replace("batch = 2", ""), "study[0].batch", "required in a throughput study"),
        (BASE + "resolutions = [64]\n", "study[0].resolutions", "absent in a throughput"),
        (
            BASE + '[[study]]\nname = "a"\nkind = "throughput"\nworkload = "resnet50"\n'
            "resolution = 64\nbatch = 1\n",
            "study[1].name",
            "not used by another",
        ),
        ('name = "t"\n', "study", "one or more [[study]]"),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "sweep"\nworkload = "unet3d"\nbatch = 1\n'
            "resolutions = [16, 20]\n",
            "study[0].resolutions[1]",
            "multiple of 8",
        ),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "sweep"\nworkload = "unet3d"\nbatch = 1\n'
            "resolutions = []\n",
            "study[0].resolutions",
            "non-empty list",
        ),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "sweep"\nworkload = "unet3d"\nbatch = 1\n'
            "resolutions = {start = 16, stop = 8, step = 8}\n",
            "study[0].resolutions.stop",
            ">= 16",
        ),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "max-resolution"\nworkload = "unet3d"\n'
            "batch = 1\nstart = 16\nstop = 128\nstep = 12\n",
            "study[0].step",
            "multiple of 8",
        ),
        (
            'name = "t"\n[[study]]\nname = "s"\nkind = "max-batch"\nworkload = "resnet50"\n'
            "resolution = 224\nstart = 4\nstop = 4\nstep = 1\n",
            "study[0].stop",
            ">= 5",
        ),
    ],
)
def test_each_invalid_field_gets_one_clear_error(text, field, allowed):
    with pytest.raises(SpecError) as raised:
        parse_spec(text, "specs/t.toml")
    error = raised.value
    assert error.field == field
    message = str(error)
    assert message.startswith("specs/t.toml: field ")
    assert f"'{field}'" in message and allowed in message


def test_toml_syntax_error_names_file():
    with pytest.raises(SuiteError, match="broken.toml: not valid TOML"):
        parse_spec("name = ", "broken.toml")


def test_unknown_spec_lists_choices():
    with pytest.raises(SuiteError, match="choose one of: .*smoke"):
        load_spec("no-such-spec")


def test_overrides_change_the_hash_and_are_validated():
    plain = parse_spec(BASE, "a.toml").trials[0]
    for key, value in (("resolution", 96), ("batch", 4), ("steps", 9), ("precision", "bf16")):
        trial = parse_spec(BASE, "a.toml", {key: value}).trials[0]
        assert getattr(trial.params, key) == value and trial.hash != plain.hash
    with pytest.raises(SpecError, match="command line: field '--batch' = 0"):
        parse_spec(BASE, "a.toml", {"batch": 0})
    with pytest.raises(SpecError, match="'--precision'"):
        parse_spec(BASE, "a.toml", {"precision": "fp64"})
    with pytest.raises(SpecError, match="'--resolution' = 12 .*at least 32"):
        parse_spec(BASE, "a.toml", {"resolution": 12})
    # as they come from the command line: text
    assert parse_spec(BASE, "a.toml", {"batch": "4"}).trials[0].params.batch == 4
    with pytest.raises(SpecError, match="command line: field '--batch' = 'abc' is invalid"):
        parse_spec(BASE, "a.toml", {"batch": "abc"})


def test_an_override_meets_the_workloads_checks_in_every_kind_of_study():
    """A search's fixed resolution from the command line is checked like the file's own."""
    max_batch = (
        'name = "t"\n[[study]]\nname = "s"\nkind = "max-batch"\nworkload = "unet3d"\n'
        "resolution = 32\nstart = 1\nstop = 4\nstep = 1\n"
    )
    with pytest.raises(SpecError, match="command line: field '--resolution' = 7 is invalid"):
        parse_spec(max_batch, "m.toml", {"resolution": 7})
    search = parse_spec(max_batch, "m.toml", {"resolution": 48}).searches[0]
    assert search.params.resolution == 48
    sweep = (
        'name = "t"\n[[study]]\nname = "s"\nkind = "sweep"\nworkload = "unet3d"\n'
        "batch = 1\nresolutions = [16, 32]\n"
    )
    with pytest.raises(SpecError, match="'--resolution' = 20"):
        parse_spec(sweep, "s.toml", {"resolution": 20})
    assert [t.params.resolution for t in parse_spec(sweep, "s", {"resolution": 48}).trials] == [48]


def test_sweep_range_expands():
    text = (
        'name = "t"\n[[study]]\nname = "s"\nkind = "sweep"\nworkload = "unet3d"\n'
        "batch = 1\nresolutions = {start = 16, stop = 48, step = 16}\n"
    )
    assert [t.params.resolution for t in parse_spec(text, "s").trials] == [16, 32, 48]


SEARCH = """
name = "s"
[defaults]
memory_budget = "200MiB"
[[study]]
name = "m"
kind = "max-resolution"
workload = "googlenet"
batch = 2
start = 64
stop = 256
step = 32
{extra}
"""


def test_a_search_runs_lms_off_and_on_with_shared_limit_key():
    (search,) = parse_spec(SEARCH.format(extra=""), "s.toml").searches
    assert search.modes == ("off", "on") and search.candidates == [64, 96, 128, 160, 192, 224, 256]
    off, on = search.trial(128, "off"), search.trial(128, "on")
    assert off.params.lms is None and on.params.lms["swapout_threshold"] == -1
    assert off.params.resolution == 128 and off.params.memory_budget_bytes == 200 * 2**20
    assert search.hash("off") != search.hash("on")
    (only_on,) = parse_spec(SEARCH.format(extra='lms_mode = "on"'), "s.toml").searches
    assert only_on.modes == ("on",) and only_on.limit_key == search.limit_key


def test_a_search_confirms_its_boundary_as_its_defaults_or_its_study_say():
    (search,) = parse_spec(SEARCH.format(extra=""), "s.toml").searches
    assert (search.boundary_repeats, search.boundary_spread) == (2, 0.1)
    text = SEARCH.format(extra="boundary_spread = 0.05").replace(
        "[defaults]\n", "[defaults]\nboundary_repeats = 4\nboundary_spread = 0.2\n"
    )
    (chosen,) = parse_spec(text, "s.toml").searches
    assert (chosen.boundary_repeats, chosen.boundary_spread) == (4, 0.05)
    # how many processes confirm a limit is not what a trial or search measures: not hashed
    assert (chosen.hash("off"), chosen.hash("on")) == (search.hash("off"), search.hash("on"))
    assert chosen.trial(128, "on").hash == search.trial(128, "on").hash
    with pytest.raises(SpecError) as error:
        parse_spec(SEARCH.format(extra="boundary_repeats = 1.5"), "s.toml")
    assert error.value.field == "study[0].boundary_repeats" and ">= 0" in str(error.value)
    # in [defaults] it may stand beside studies that are not searches (defaults apply to all)
    assert parse_spec(spec_with(defaults_extra="boundary_repeats = 0"), "t.toml").trials


def test_lms_mode_is_validated_per_study_kind():
    with pytest.raises(SpecError) as error:
        parse_spec(SEARCH.format(extra='lms_mode = "switch"'), "s.toml")
    message = str(error.value)
    assert "s.toml" in message and "study[0].lms_mode" in message and "'both'" in message
    with pytest.raises(SpecError, match="study\\[0\\].lms_mode"):
        parse_spec(spec_with('lms_mode = "switch"'), "t.toml")  # a throughput study: no sizes
    both = parse_spec(spec_with('lms_mode = "both"'), "t.toml").trials
    assert [t.params.lms is not None for t in both] == [False, True]


SWEEP = """
name = "w"
[[study]]
name = "sw"
kind = "sweep"
workload = "googlenet"
batch = 1
resolutions = [128, 64, 96]
lms_mode = "{mode}"
"""


def test_switch_and_both_sweeps():
    switch = parse_spec(SWEEP.format(mode="switch"), "w.toml")
    (sweep,) = switch.switch_sweeps
    assert not switch.trials and sweep.resolutions == (64, 96, 128)
    assert (
        sweep.trial(96, "on").params.lms is not None and sweep.trial(96, "off").params.lms is None
    )
    assert len(switch.plannable_trials()) == 3
    both = parse_spec(SWEEP.format(mode="both"), "w.toml")
    assert len(both.trials) == 6
    assert sum(t.params.lms is not None for t in both.trials) == 3
    # an LMS-off trial of a sweep is the same trial (hash) as in a plain sweep
    fixed = parse_spec(SWEEP.format(mode="fixed"), "w.toml")
    assert {t.hash for t in fixed.trials} <= {t.hash for t in both.trials}
    assert sweep.trial(64, "off").hash in {t.hash for t in fixed.trials}


def test_loading_a_spec_with_lms_imports_no_tensorflow():
    """Specs are loaded by the parent of every trial (the runner, the Docker host driver, the
    report), which must stay free of TensorFlow: trials and predictions hold it, in children."""
    code = (
        "import sys; from suite.specs import load_spec; "
        "import suite.running.runner, suite.hosts.docker, suite.reporting.report; "
        "spec = load_spec('resnet50-sweep'); "
        "assert any(t.params.lms for t in spec.plannable_trials()); "
        "print(sorted(m for m in ('tensorflow', 'keras') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    )
    assert out.stdout.strip() == "[]"
