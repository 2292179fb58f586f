import pytest
from _unwritable import unwritable

from suite.errors import RecordError
from suite.records import (
    existing_writable_directory,
    readable_directory,
    writable_directory,
    writable_file,
    write_atomic,
)


def test_write_atomic_replaces_the_whole_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "deep" / "file.json"
    write_atomic(path, "first")
    write_atomic(path, "second")
    assert path.read_text() == "second"
    assert sorted(p.name for p in path.parent.iterdir()) == ["file.json"]


def test_a_file_or_an_unwritable_directory_is_refused_naming_the_option(tmp_path):
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a directory")
    for check in (writable_directory, readable_directory):
        with pytest.raises(RecordError, match=f"^--results {a_file}: a file, not a directory"):
            check(a_file, "--results")
    with pytest.raises(RecordError, match=f"^--output {tmp_path}: a directory, not a file"):
        writable_file(tmp_path, "--output")
    with pytest.raises(RecordError, match="cannot write there \\(Not a directory\\)"):
        writable_directory(a_file / "deeper", "--output")
    made = writable_directory(tmp_path / "new" / "dir", "--output")  # missing: made
    assert made.is_dir() and list(made.iterdir()) == []  # the probe leaves nothing behind
    assert readable_directory(tmp_path / "missing", "--results") == tmp_path / "missing"
    with unwritable(tmp_path / "locked") as locked:
        with pytest.raises(RecordError, match=f"^--output {locked}: cannot write there "):
            writable_directory(locked, "--output")
        with pytest.raises(RecordError, match=f"^--output {locked}: cannot write there "):
            writable_file(locked / "baseline.json", "--output")


def test_a_directory_lent_to_lms_must_exist_be_one_and_be_writable(tmp_path, monkeypatch):
    """`--host-disk`: never made (a disk the user chose), one error naming the option and the
    path for each way it can be wrong; a relative path comes back absolute."""
    missing, a_file = tmp_path / "missing", tmp_path / "disk.img"
    a_file.write_text("")
    with pytest.raises(RecordError, match=f"^--host-disk {missing}: no such directory; give an"):
        existing_writable_directory(missing, "--host-disk")
    assert not missing.exists()
    with pytest.raises(RecordError, match=f"^--host-disk {a_file}: a file, not a directory"):
        existing_writable_directory(a_file, "--host-disk")
    with (
        unwritable(tmp_path / "locked") as locked,
        pytest.raises(RecordError, match=f"^--host-disk {locked}: cannot write there "),
    ):
        existing_writable_directory(locked, "--host-disk")
    monkeypatch.chdir(tmp_path.parent)
    assert existing_writable_directory(tmp_path.name, "--host-disk") == tmp_path
