"""Base builds talk and survive a syncing mirror: suite.hosts.baseimage's runner of debootstrap,
driven by real shell scripts that print what debootstrap prints."""

import pytest

from suite.errors import SuiteError
from suite.hosts import baseimage


@pytest.fixture(autouse=True)
def quick(monkeypatch):
    monkeypatch.setattr(baseimage, "RETRY_PAUSE_S", 0)
    monkeypatch.setattr(baseimage, "HEARTBEAT_S", 0.2)


MISMATCH = (
    "E: Failed to fetch http://deb.debian.org/debian-security/dists/bookworm-security/main/"
    "binary-ppc64el/Packages.xz  File has unexpected size (1234 != 5678). Mirror sync in progress?"
)


def script(tmp_path, body: str) -> list[str]:
    path = tmp_path / "fake-debootstrap.sh"
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)
    return [str(path)]


def test_phases_are_echoed_once_each_and_a_quiet_step_says_what_it_does(tmp_path):
    log = tmp_path / "debootstrap.log"
    body = f"""
for p in a b c; do echo "I: Retrieving $p 1.0"; echo "I: Validating $p 1.0"; done
echo "I: Configuring required packages..."
echo "Setting up libc6:arm64 (2.36-9) ..." >> {log}
sleep 1
"""
    command = script(tmp_path, body)
    lines = []
    baseimage._run_talking(command, lines.append, "debootstrap", log)
    said = "\n".join(lines)
    assert said.count("Retrieving") == 1 and said.count("Validating") == 1  # not once a package
    assert "Configuring required packages" in said
    assert "Setting up libc6:arm64" in said  # the heartbeat, from debootstrap's own log
    assert lines[-1].strip().startswith("done in")


def test_a_mirror_mid_sync_is_retried(tmp_path):
    marker = tmp_path / "tried"
    body = f"""
if [ ! -e {marker} ]; then touch {marker}; echo "{MISMATCH}"; exit 1; fi
echo "I: Retrieving InRelease"
"""
    command = script(tmp_path, body)
    lines = []
    baseimage._run_talking(command, lines.append, "debootstrap")
    assert any("the mirror failed" in line for line in lines)
    assert any("(attempt 2/3)" in line for line in lines)


def test_a_mirror_that_keeps_failing_is_one_line(tmp_path):
    command = script(tmp_path, f'echo "I: Retrieving InRelease"; echo "{MISMATCH}"; exit 1\n')
    lines = []
    with pytest.raises(SuiteError) as caught:
        baseimage._run_talking(command, lines.append, "debootstrap")
    message = str(caught.value)
    assert "\n" not in message and "the mirror kept failing" in message
    assert "Mirror sync in progress?" in message and baseimage.MIRROR in message
    assert sum("$ " in line for line in lines) == baseimage.ATTEMPTS


def test_other_failures_are_not_retried(tmp_path):
    command = script(tmp_path, 'echo "E: Unknown architecture sparc"; exit 1\n')
    lines = []
    with pytest.raises(SuiteError, match=r"debootstrap failed \(exit 1, .*Unknown architecture"):
        baseimage._run_talking(command, lines.append, "debootstrap")
    assert sum("$ " in line for line in lines) == 1
