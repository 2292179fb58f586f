import json
import logging

import pytest

from suite.records import DamagedRecord, host_ref, load_host, store_host

HOST = {
    "architecture": "x86_64",
    "cpu": {"model": "Test CPU", "sockets": 1, "cores": 2, "threads": 4},
    "memory_bytes": 2**34,
    "gpus": [],
}


def test_host_descriptions_are_stored_once_by_content_and_read_typed(tmp_path):
    ref = store_host(tmp_path, HOST)
    assert store_host(tmp_path, dict(HOST)) == ref
    assert store_host(tmp_path, {**HOST, "architecture": "ppc64le"}) != ref
    description = load_host(tmp_path, ref)
    assert (description.architecture, description.cpu.cores, description.gpus) == ("x86_64", 2, ())
    assert description.emulation is None and description.suite is None  # older captures lack them
    assert description.raw == HOST
    assert load_host(tmp_path, "0000") is None


@pytest.mark.parametrize(
    "stored, problem",
    [
        ("[1, 2", "not valid JSON"),
        ({k: v for k, v in HOST.items() if k != "cpu"}, "lacks required field 'cpu'"),
        (
            {**HOST, "link": {"sizes_bytes": [1], "memcpy_gbps": [1.0], "gpus": []}},
            "field 'link.sizes_bytes' lacks one of the sizes",
        ),
        ({**HOST, "memory_bytes": "16G"}, "field 'memory_bytes' = \"16G\" is invalid"),
    ],
)
def test_a_host_description_the_report_cannot_show_is_skipped_saying_what_to_run(
    tmp_path, caplog, stored, problem
):
    """Written by hand or by another tool under its own hash (store_host refuses it)."""
    text = stored if isinstance(stored, str) else json.dumps(stored)
    ref = host_ref(stored)
    path = tmp_path / "hosts" / f"{ref}.json"
    path.parent.mkdir()
    path.write_text(text)
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert load_host(tmp_path, ref) is None
    (warning,) = caplog.messages
    assert warning.startswith(f"{path}: skipping a host description: ") and problem in warning
    assert warning.endswith("re-run a trial on that host to describe it again")


def test_a_host_description_edited_since_it_was_stored_is_skipped(tmp_path, caplog):
    ref = store_host(tmp_path, HOST)
    (tmp_path / "hosts" / f"{ref}.json").write_text(json.dumps({**HOST, "memory_bytes": 1}))
    with caplog.at_level(logging.WARNING, logger="suite.records"):
        assert load_host(tmp_path, ref) is None
    assert f"its content does not match its hash {ref}" in caplog.text


def test_a_description_without_what_the_hosts_table_shows_is_not_stored(tmp_path):
    with pytest.raises(DamagedRecord, match="lacks required field 'cpu'"):
        store_host(tmp_path, {"architecture": "x86_64", "memory_bytes": 1})
    assert not (tmp_path / "hosts").exists()
