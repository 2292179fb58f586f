"""A directory nobody here can write in, for the tests of unwritable `--results` and `--output`.

chmod 0555 stops an ordinary user; root ignores it (these tests often run as root, in CI and in
containers), and only an immutable directory (`chattr +i`, ext4 and others) stops root too. When
neither stops this process, the test is skipped with that reason: nothing here could fail.
"""

import contextlib
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest


def _can_write(directory: Path) -> bool:
    try:
        with tempfile.TemporaryFile(dir=directory):
            return True
    except OSError:
        return False


@contextlib.contextmanager
def unwritable(directory: Path):
    """`directory` (made if missing) unwritable for this process and its children while inside."""
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o555)
    immutable = False
    try:
        if _can_write(directory) and shutil.which("chattr"):  # root: chmod does not stop it
            immutable = (
                subprocess.run(["chattr", "+i", str(directory)], capture_output=True).returncode
                == 0
            )
        if _can_write(directory):
            pytest.skip(
                f"{directory} stays writable for this user (root) with chmod 0555, "
                "and chattr +i fails here: no unwritable directory to test"
            )
        yield directory
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(directory)], check=True)
        directory.chmod(0o755)
