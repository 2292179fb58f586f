import json
import logging

from suite.records import LinkProjection, Projection, load_projections, write_projections

LINK = LinkProjection("pcie3", "PCIe 3 x16", 12e9, 13e9, 1e-5, 0.5, 4.0, 0.1, 0.2)
PROJECTION = Projection(
    "s", "study", "abcd", "googlenet", 224, 2, "fp32", "host", 0.25, 8.0, 2**20, 2**21, 10, (LINK,)
)


def test_projections_are_versioned_and_round_trip(tmp_path):
    assert load_projections(tmp_path) is None
    path = write_projections(tmp_path, [PROJECTION])
    assert json.loads(path.read_text())["schema"] == 2
    assert load_projections(tmp_path) == [PROJECTION]


def test_a_projection_file_that_cannot_be_read_is_skipped_saying_what_to_run(tmp_path, caplog):
    path = tmp_path / "projection.json"
    for text, problem in (
        ("[{", "not valid JSON"),
        (json.dumps({"schema": 7}), "not a projection file this suite reads (schema 7)"),
        (json.dumps([{"spec": "s"}]), "lacks required field 'projections.0.study'"),
    ):
        path.write_text(text)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="suite.records"):
            assert load_projections(tmp_path) is None
        (warning,) = caplog.messages
        assert warning.startswith(f"{path}: skipping the projections: ") and problem in warning
        assert warning.endswith("run `inv project` again")
