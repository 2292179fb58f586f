"""The published site as a reader sees it. Two nights of realistic records are reported and
published with the tasks (`inv report`, `inv baseline`, `inv regress`, `inv publish`); Debian's
Chromium, headless, then loads the site from disk (file://, no server) over the DevTools pipe
(tests/support/browser.py) and the test reads what is on the pages: titles, a table's numbers,
images that loaded, links that resolve, nothing fetched from elsewhere. Screenshots of the index
and of a run's page are kept in $LMS_TEST_ARTIFACTS (default: test-artifacts/)."""

import copy
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from browser import Browser, chromium, version
from report_cases import HOST, LMS_EVERYTHING, record, search_record, write_record

from suite.records import store_host

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("LMS_TEST_ARTIFACTS") or ROOT / "test-artifacts")
NIGHTS = ("2026-11-20", "2026-11-21")
# images/sec per trial process, three processes a night: alpha trains 10 with LMS off each night;
# on the second night beta with LMS on is 30 % slower, a regression the gate and the site show
RATES = {"alpha": (10.0, 8.0), "beta": (18.0, 8.5)}
SLOWER = {("beta", "on1", 1): 0.7}
SPREAD = (0.98, 1.0, 1.02)
TIMELINE = {
    "device_bytes_without_lms": [2**29, 2**31, 2**29],
    "device_bytes_with_lms": [2**29, 2**30 - 1, 2**29],
    "host_bytes": [0, 2**30, 0],
}

# what the page tells the test, read in the page itself
IMAGES = "[...document.images].map(i => [i.getAttribute('src'), i.complete && i.naturalWidth])"
CELLS = "[...document.querySelectorAll('td')].map(td => td.textContent.trim())"
LINKS = "[...document.links].map(a => a.href)"
IDS = "[...document.querySelectorAll('[id]')].map(e => e.id)"
FETCHED = "performance.getEntriesByType('resource').map(e => e.name)"


def inv(*args):
    return subprocess.run(
        [sys.executable, "-m", "invoke", *args], cwd=ROOT, capture_output=True, text=True
    )


def night(results: Path, number: int, refs: dict) -> None:
    """One night's run on two hosts: LMS off and on (with its simulated memory), and limits."""
    for host, (off, on) in RATES.items():
        for repeat, factor in enumerate(SPREAD):
            for spec_hash, rate in (("off1", off), ("on1", on)):
                rate *= factor * SLOWER.get((host, spec_hash, number), 1.0)
                made = record(host, refs[host], spec_hash, rate, 0.1, repeat=repeat)
                made.update(
                    run=f"night-{number}",
                    started_at=f"{NIGHTS[number]}T02:0{repeat}:00+00:00",
                    finished_at=f"{NIGHTS[number]}T02:0{repeat}:30+00:00",
                )
                if spec_hash == "on1":
                    made["params"]["lms"] = LMS_EVERYTHING
                    made["metrics"]["lms"] = {"budget_bytes": 2**30, "timeline": TIMELINE}
                write_record(results, made)
        for kind, mode, largest in (
            ("max-resolution", "off", 416),
            ("max-resolution", "on", 832),
            ("max-batch", "off", 4),
            ("max-batch", "on", 12),
        ):
            made = search_record(host, refs[host], kind, mode, largest, None)
            made.update(started_at=f"{NIGHTS[number]}T03:00:00+00:00")
            made.update(finished_at=f"{NIGHTS[number]}T03:10:00+00:00")
            write_record(results, made)


def run(*args):
    done = inv(*args)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """Two nights reported and published: the site's folder and the two runs' names."""
    base = tmp_path_factory.mktemp("site")
    results, reports, site = base / "results", base / "reports", base / "published"
    ppc = copy.deepcopy(HOST)
    ppc.update(architecture="ppc64le", tensorflow_version="2.14.1")
    refs = {"alpha": store_host(results, HOST), "beta": store_host(results, ppc)}
    baseline = base / "baseline.json"
    for number in range(len(NIGHTS)):
        night(results, number, refs)
        if number == 0:
            run("baseline", "--results", str(results), "--output", str(baseline))
        else:
            done = inv(
                "regress",
                *("--results", str(results), "--baseline", str(baseline)),
                *("--output", str(reports)),
            )
            assert done.returncode in (0, 1), done.stderr  # 1: a regression, still reported
        run("report", "--results", str(results), "--output", str(reports))
        run("publish", "--reports", str(reports), "--to", str(site), "--results", str(results))
    runs = sorted(p.name for p in site.iterdir() if p.is_dir() and p.name[0].isdigit())
    return site, runs


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    executable = chromium()
    if executable is None:
        pytest.skip(
            "Debian's chromium is not installed: `inv test` installs it (scripts/chromium.sh)"
        )
    opened = Browser(executable, tmp_path_factory.mktemp("profile"))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / "chromium-version.txt").write_text(version(executable) + "\n")
    yield opened
    opened.close()


def broken(browser) -> list[str]:
    """The page's images that did not load (no pixels)."""
    return [src for src, width in browser.evaluate(IMAGES) if not width]


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header.startswith(b"\x89PNG\r\n\x1a\n")
    return struct.unpack(">II", header[16:24])


def local(url: str) -> Path:
    return Path(unquote(urlsplit(url).path))


@pytest.mark.chromium
def test_the_index_shows_the_latest_answer_the_history_and_every_run(browser, site):
    folder, runs = site
    browser.open((folder / "index.html").as_uri())
    assert browser.evaluate("document.title") == "LMS benchmark results"
    latest = browser.evaluate("document.querySelector('#latest h2').textContent")
    assert latest == f"Latest run: {runs[-1]} — LMS benchmark report"
    cells = browser.evaluate(CELLS)
    # alpha, LMS off: 9.8, 10 and 10.2 images/sec each night
    assert any(c.startswith("10 ± ") and c.endswith("(6 processes)") for c in cells), cells
    sections = browser.evaluate("[...document.querySelectorAll('#latest h3')].map(h => h.id)")
    assert sections[:2] == ["the-answer", "regression-check"]
    assert cells.count("regression") == 1  # beta, LMS on, 30 % slower on the second night
    images = browser.evaluate(IMAGES)
    assert images and not broken(browser), images
    assert all(src.startswith("history/") for src, _ in images)
    shot = browser.screenshot(ARTIFACTS / "site-index.png")
    assert png_size(shot) == (1280, 2000)


@pytest.mark.chromium
def test_every_link_on_the_index_resolves_and_nothing_is_fetched_from_elsewhere(browser, site):
    folder, runs = site
    browser.open((folder / "index.html").as_uri())
    links = browser.evaluate(LINKS)
    assert {f"{folder.as_uri()}/{name}/report.html" for name in runs} <= set(links)
    for link in links:
        assert link.startswith("file://"), link
        assert local(link).is_file(), link
        fragment = urlsplit(link).fragment
        if fragment:
            assert fragment in browser.evaluate(IDS), link
    assert all(url.startswith("file://") for url in browser.evaluate(FETCHED))


@pytest.mark.chromium
def test_a_runs_page_shows_its_tables_plots_and_sections(browser, site):
    folder, runs = site
    browser.open((folder / runs[-1] / "report.html").as_uri())
    assert browser.evaluate("document.title") == f"LMS benchmark report — {runs[-1]}"
    assert browser.evaluate("document.querySelector('h1').textContent") == "LMS benchmark report"
    cells = browser.evaluate(CELLS)
    assert "416 → 832 (4.00× pixels)" in cells  # the limits, off → on
    assert any(c.startswith("10 ± ") for c in cells)
    images = browser.evaluate(IMAGES)
    assert {src for src, _ in images} >= {"throughput.png", "memory-on1.png"}
    assert not broken(browser), images
    ids = browser.evaluate(IDS)
    for link in browser.evaluate(LINKS):
        fragment = urlsplit(link).fragment
        assert local(link).is_file(), link
        assert not fragment or local(link) != folder / runs[-1] / "report.html" or fragment in ids
    shot = browser.screenshot(ARTIFACTS / "site-run.png")
    assert png_size(shot) == (1280, 2000)


@pytest.mark.chromium
def test_the_history_page_shows_every_run_with_its_plot(browser, site):
    folder, _ = site
    browser.open((folder / "history" / "history.html").as_uri())
    assert browser.evaluate("document.title") == "LMS benchmark history"
    images = browser.evaluate(IMAGES)
    assert images and not broken(browser), images
    cells = browser.evaluate(CELLS)
    for run in ("night-0", "night-1"):  # each night is a row of the history's table
        assert any(c.endswith(f"({run})") for c in cells), (run, cells)
    for link in browser.evaluate(LINKS):
        assert local(link).is_file(), link
    browser.screenshot(ARTIFACTS / "site-history.png")


@pytest.mark.chromium
def test_the_image_check_sees_a_broken_plot(browser, site, tmp_path):
    """What proves the checks above: the same page with one plot deleted has one broken image."""
    folder, runs = site
    copied = tmp_path / "published"
    shutil.copytree(folder, copied)
    (copied / runs[-1] / "throughput.png").unlink()
    browser.open((copied / runs[-1] / "report.html").as_uri())
    assert broken(browser) == ["throughput.png"]


def test_publishing_without_a_report_is_one_line(tmp_path):
    done = inv("publish", "--reports", str(tmp_path), "--to", str(tmp_path / "site"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line == f"error: {tmp_path}/report.md does not exist: run `inv report` first"


def test_a_report_without_its_plots_is_published_with_the_gap_said(tmp_path, site):
    folder, runs = site
    reports = tmp_path / "reports"
    shutil.copytree(folder / runs[-1], reports)
    (reports / "memory-on1.png").unlink()
    done = inv("publish", "--reports", str(reports), "--to", str(tmp_path / "site"))
    assert done.returncode == 0, done.stderr
    assert "published without 1 plot(s) the report refers to: memory-on1.png" in done.stdout
