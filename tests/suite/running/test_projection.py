"""suite.running.projection: which trials `inv project` profiles and projects, and a named GPU's
projection planned for that GPU's host, not this machine."""

import logging

import pytest

from suite.errors import SuiteError
from suite.lms_seam import HOST_NOT_CHECKED
from suite.specs import load_spec


def test_studies_that_differ_only_in_their_link_are_projected_once():
    from suite.running.projection import projected_trials

    spec = load_spec("link-emulated")
    assert len(spec.trials) == 8
    chosen = projected_trials(spec)
    assert [t.study for t in chosen] == ["googlenet-host-memory", "deeplabv3plus-host-memory"]
    assert [t.study for t in projected_trials(load_spec("smoke"), "googlenet")] == [
        "googlenet-throughput"
    ]  # its LMS-on trial only


def test_the_seeds_four_studies_project_on_a_v100_to_the_end(tmp_path, capsys, caplog):
    """`inv project --spec googlenet-enlarged --gpu v100` ended in a HostMemoryError at its
    4-GPU study (the V100 host's plan was checked against this machine's free memory), and each
    study warned that LMS could not measure GPU:0. A V100's host is not this machine: without
    --host-memory nothing is checked and one line says so; nothing about a meter is said."""
    from suite.running.projection import project_spec

    spec = load_spec("googlenet-enlarged", {"resolution": "64", "batch": "2"})
    with caplog.at_level(logging.WARNING, logger="lms"):
        results = project_spec(spec, tmp_path, ["pcie3", "nvlink2"], "v100")
    assert [p.study for p in results] == [
        "lms-everything",
        "lms-auto",
        "lms-everything-4gpus",
        "lms-auto-4gpus",
    ]
    everything = results[0]
    assert everything.swaps > 0 and everything.in_bytes_per_step > 0
    pcie3, nvlink2 = everything.links
    assert pcie3.images_per_sec < nvlink2.images_per_sec
    lms_records = [r for r in caplog.records if r.name.startswith("lms")]
    assert [r.getMessage() for r in lms_records if r.levelno >= logging.WARNING] == []
    err = capsys.readouterr().err
    assert err.count(HOST_NOT_CHECKED) == 1 and "cannot measure" not in err


def test_a_named_gpus_projection_is_checked_against_the_host_memory_given(tmp_path, capsys):
    from suite.running.projection import project_spec

    spec = load_spec("smoke", {"resolution": "64", "batch": "2"})
    with pytest.raises(SuiteError, match="over the 1.00 MiB of host memory given"):
        project_spec(spec, tmp_path, ["pcie3"], "v100", "googlenet", host_memory=2**20)
    (fits,) = project_spec(spec, tmp_path, ["pcie3"], "v100", "googlenet", 2**39)
    assert fits.swaps > 0
    assert HOST_NOT_CHECKED not in capsys.readouterr().err


def _spec(name: str, description: str, studies: dict) -> str:
    """A spec of GoogLeNet 64² b2 throughput studies: {study name: its `lms` table (TOML)}."""
    text = f'name = "{name}"\ndescription = "{description}"\n'
    text += '[defaults]\nprecision = "fp32"\nsteps = 2\n'
    for study, lms_table in studies.items():
        text += f'[[study]]\nname = "{study}"\nkind = "throughput"\nlms_mode = "fixed"\n'
        text += f'workload = "googlenet"\nresolution = 64\nbatch = 2\nlms = {lms_table}\n'
    return text


FORCED = "swapout_threshold = 1, swapin_ahead = 1, swapin_groupby = 0"
SPLIT_SPEC = _spec(
    "split-projection",
    "GoogLeNet 64² b2 with its convolutions, biases and ReLUs in two pieces, or not.",
    {
        "pieces": f"{{ {FORCED}, split = {{ Conv2D = 2, BiasAdd = 2, Relu = 2 }} }}",
        "whole": f'{{ {FORCED}, split = "off" }}',
    },
)


def test_a_split_plans_projection_counts_the_bytes_its_pieces_move(tmp_path):
    """`inv project` replays a split plan with its pieces' host copies (issue 44): the same
    swaps with the convolutions, biases and ReLUs split move more bytes each way, and each
    link's rate is lower, than with none split (before, a split plan projected its swaps
    only)."""
    from suite.running.projection import project_spec

    path = tmp_path / "split-projection.toml"
    path.write_text(SPLIT_SPEC)
    pieces, whole = project_spec(load_spec(str(path)), tmp_path, ["pcie3"], "v100")
    assert pieces.in_bytes_per_step > whole.in_bytes_per_step > 0
    assert pieces.out_bytes_per_step > whole.out_bytes_per_step > 0
    assert pieces.links[0].images_per_sec < whole.links[0].images_per_sec


TOO_SMALL = {"too-small": '{ device_memory = "1MiB" }'}
TWO_DEVICES_SPEC = _spec(
    "two-devices",
    "GoogLeNet 64² b2 planned for a 1 MiB device, which nothing fits, and a V100.",
    TOO_SMALL | {"v100": f"{{ {FORCED} }}"},
)


def test_a_trial_that_does_not_fit_is_said_and_the_others_projected(tmp_path, capsys):
    """split-gpu's swapping-alone studies do not fit a GPU its split ones fit: `inv project`
    says so for each and projects the rest (before, the first one ended the projection);
    `--device-memory` plans a named GPU of another size for every trial."""
    from suite.running.projection import project_spec

    path = tmp_path / "two-devices.toml"
    path.write_text(TWO_DEVICES_SPEC)
    spec = load_spec(str(path))
    (projected,) = project_spec(spec, tmp_path, ["pcie3"], "v100")
    assert projected.study == "v100" and projected.swaps > 0
    assert "not projected: googlenet 64px batch 2" in capsys.readouterr().err
    both = project_spec(spec, tmp_path, ["pcie3"], "v100", device_memory=2**40)
    assert [p.study for p in both] == ["too-small", "v100"]
    path.write_text(_spec("too-small", "GoogLeNet 64² b2 in 1 MiB.", TOO_SMALL))
    with pytest.raises(SuiteError, match="no trial projected: too-small: googlenet 64px"):
        project_spec(load_spec(str(path)), tmp_path, ["pcie3"], "v100")
    with pytest.raises(SuiteError, match="--device-memory plans for another host's GPU"):
        project_spec(spec, tmp_path, ["pcie3"], "host", device_memory=2**30)
