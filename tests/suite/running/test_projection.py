"""suite.running.projection: which trials `inv project` profiles and projects."""

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
