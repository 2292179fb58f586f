import pytest
from _unwritable import unwritable

from suite.errors import RecordError
from suite.records import readable_directory, writable_directory, writable_file, write_atomic


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
