"""`dispatch` is a loop over `Host` methods: hosts that share this machine take turns by rounds,
hosts apart run in threads meanwhile, the rest after; a kind's resume marker gives every host its
run id and goes once all is done; an interruption stops every host and its last line says what
each kind stopped. Shown with hosts of a test kind that record what they are asked."""

import threading
from dataclasses import replace

import pytest
from tiny_specs import TINY

from suite.dispatch import SpecRun, dispatch
from suite.dispatch.base import Host
from suite.dispatch.docker import DockerHost
from suite.errors import SuiteError
from suite.hosts.docker import HostOutcome
from suite.running.interrupts import RunInterrupted
from suite.running.resume import UnfinishedRun
from suite.specs import parse_spec

SPEC = TINY.replace("timeout = 300", "timeout = 300\nrepeats = 2")


class Recording(Host):
    """A host of a test kind: says what it was asked to run, and how it ended."""

    kind = "recording"

    def __init__(self, name, calls, where="here", ok=True, raises=None):
        self.name, self.calls, self.where, self.ok, self.raises = name, calls, where, ok, raises
        self.stopped = self.settled = False

    @property
    def on_this_machine(self) -> bool:
        return self.where == "here"

    @property
    def in_thread(self) -> bool:
        return self.where == "apart"

    def run(self, job, round_=None):
        self.calls.append((self.name, round_, job.run_id))
        if self.raises:
            raise self.raises
        return HostOutcome(self.name, self.ok, "" if self.ok else "broke", records=1, seconds=1.0)

    def stop(self, signal_name):
        self.stopped = signal_name

    def settle(self, timeout):
        self.settled = True
        return True

    @classmethod
    def marker(cls, hosts, job):
        return UnfinishedRun(job.results, "recording", job.spec)

    @classmethod
    def interrupted(cls, hosts, job):
        return f"stopped {', '.join(h.name for h in hosts if h.stopped)}"


@pytest.fixture
def lines():
    return []


@pytest.fixture
def job(tmp_path, lines):
    return SpecRun(parse_spec(SPEC, str(tmp_path / "tiny.toml")), tmp_path, echo=lines.append)


def test_places_on_this_machine_take_turns_by_rounds_and_their_rounds_make_one_outcome(job, lines):
    calls = []
    hosts = [Recording("a", calls), Recording("b", calls), Recording("c", calls, where="later")]
    assert dispatch(job, hosts) == (0, 3)
    run_id = calls[0][2]
    assert run_id and calls == [
        ("a", 1, run_id),
        ("b", 1, run_id),
        ("a", 2, run_id),
        ("b", 2, run_id),
        ("c", None, run_id),
    ]
    assert lines[0] == "round 1/2: a, b in turn" and lines[1] == "round 2/2: a, b in turn"
    assert lines[-1].splitlines() == [
        "host a: ok (2 new records, 2s)",
        "host b: ok (2 new records, 2s)",
        "host c: ok (1 new records, 1s)",
    ]
    # completed: the marker is gone, a rerun is a new run
    assert not list((job.results / "unfinished").rglob("*.json"))


def test_one_place_here_runs_once_and_a_host_apart_runs_in_its_own_thread(job, lines):
    calls, threads = [], []
    apart = Recording("far", calls, where="apart", ok=False)
    apart.run = lambda job, round_=None: (
        threads.append(threading.current_thread()),
        Recording.run(apart, job, round_),
    )[1]
    assert dispatch(job, [Recording("a", calls), apart], round_=2) == (1, 2)
    assert sorted(call[:2] for call in calls) == [("a", 2), ("far", 2)]
    assert threads and threads[0] is not threading.main_thread()
    assert "host far: FAILED: broke (1 new records, 1s)" in lines[-1].splitlines()
    # a round of an interleaved run keeps no marker of its own
    assert not (job.results / "unfinished").exists()


def test_a_failed_host_keeps_the_marker_and_a_rerun_continues_the_run(job):
    calls = []
    assert dispatch(job, [Recording("a", calls, where="later", ok=False)]) == (1, 1)
    assert list((job.results / "unfinished").rglob("*.json"))
    assert dispatch(job, [Recording("a", calls, where="later")]) == (0, 1)
    assert calls[0][2] == calls[1][2]  # the same run id
    assert not list((job.results / "unfinished").rglob("*.json"))


def test_an_interruption_stops_every_host_and_its_line_says_what_each_kind_stopped(job):
    calls = []
    far = Recording("far", calls, where="later")
    here = Recording("a", calls, raises=RunInterrupted("SIGTERM"))
    with pytest.raises(RunInterrupted) as error:
        dispatch(job, [here, far])
    assert str(error.value) == "interrupted by SIGTERM; stopped a, far"
    assert error.value.signal_name == "SIGTERM"
    assert (far.stopped, far.settled) == ("SIGTERM", True)
    assert [call[0] for call in calls] == ["a"]  # nothing after the interruption


def test_a_disk_lent_to_a_docker_engine_on_another_machine_is_refused_before_any_host_runs(
    job, tmp_path
):
    """`--host-disk` is a directory of this machine: a container of this machine's engine binds
    it; an engine elsewhere would bind a path of its own machine, never checked."""
    calls, lent = [], replace(job, host_disk=tmp_path)
    far = DockerHost("power9", "ssh://bench@power9.example.com", "lms-suite:ppc64le-none")
    with pytest.raises(SuiteError, match=f"--host-disk {tmp_path}: a directory of this machine; "):
        dispatch(lent, [Recording("a", calls), far])
    assert calls == []  # nothing ran anywhere
    far.check(job)  # without a disk it runs there
    DockerHost("box", "local", "lms-suite:x86_64-cpu").check(lent)  # binds it: no error
