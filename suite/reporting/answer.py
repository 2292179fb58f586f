"""The report's first table, the answer the suite exists to give: per workload and host, how fast
training runs with LMS off and on, how far resolution and batch go with LMS off and on, and how
each host compares with the reference host.

Every rate is one value per trial process (the mean over its timed steps); the spread between
processes is the uncertainty, since the steps inside one process share that minute's machine load.
Host ratios come with a 95 % confidence interval (`suite.stats.ratio_interval`), and say "no
significant difference" when it holds 1.
"""

import statistics
from collections import defaultdict

from tabulate import tabulate

from suite.records import Rate, SearchRecord, TrialRecord
from suite.reporting.limits_table import gain_text
from suite.running.machine_load import busy_text, is_busy
from suite.stats import ratio_interval, ratio_text

DASH = "—"


def images_per_sec(record: TrialRecord) -> Rate | None:
    """The images/sec of a trial process that trained; None for one that did not."""
    return record.metrics.images_per_sec if record.ok and record.metrics else None


def process_rates(records: list[TrialRecord]) -> list[float]:
    """images/sec of each trial process that trained."""
    return [rate.mean for rate in map(images_per_sec, records) if rate]


def _busy_text(records: list[TrialRecord]) -> str:
    """ "; ⚠ 1 on a busy machine (others used 1.1 of 2 cores)": the processes that trained while
    other processes held a quarter of the cores or more (`machine_load.is_busy`), the busiest
    named; "" when none was (or the records predate the measurement)."""
    loads = [r.metrics.machine_load for r in records if r.ok and r.metrics]
    busy = [load for load in loads if is_busy(load)]
    if not busy:
        return ""
    busiest = max(busy, key=lambda load: load.other_cores.mean)
    return f"; ⚠ {len(busy)} on a busy machine ({busy_text(busiest)})"


def rate_text(records: list[TrialRecord]) -> str:
    """ "9.14 ± 0.31 (3 processes)": mean over processes ± its standard error between them; with
    one process, ± is the standard error over its steps, and says so. No process that trained:
    how they ended; some that did not: how many, and how they ended (a size at the edge of the
    memory budget trains in one process and not in the next)."""
    rates = process_rates(records)
    failed = [r for r in records if not r.ok]
    outcomes = ", ".join(sorted({r.outcome.replace("_", " ") for r in failed}))
    if not rates:
        return outcomes or DASH
    also = f"; {len(failed)} of {len(records)}: {outcomes}" if failed else ""
    also += _busy_text(records)
    if len(rates) == 1:
        (rate,) = filter(None, map(images_per_sec, records))
        return f"{rate.mean:.3g} ± {rate.stderr:.2g} (steps of 1 process{also})"
    error = statistics.stdev(rates) / len(rates) ** 0.5
    return f"{statistics.fmean(rates):.3g} ± {error:.2g} ({len(rates)} processes{also})"


def _limit_cell(off: SearchRecord | None, on: SearchRecord | None) -> str:
    """ "416 → 1056 (6.44× pixels)" for a search pair; "—" for what was not searched."""
    if off is None and on is None:
        return DASH

    def limit(record):
        if record is None or record.largest_ok is None:
            return DASH if record is None else "none"
        return f"≥{record.largest_ok}" if record.stop_reached else str(record.largest_ok)

    gain = gain_text(off, on)
    return f"{limit(off)} → {limit(on)}" + (f" ({gain})" if gain != DASH else "")


def _newest_searches(searches: list[SearchRecord]) -> dict:
    """{(workload, host, kind): {mode: newest search record}}"""
    found = defaultdict(dict)
    for record in sorted(searches, key=lambda r: r.finished_at):
        found[(record.params.workload, record.host, record.kind)][record.mode] = record
    return found


def answer_tables(
    records: list[TrialRecord], searches: list[SearchRecord], emulated=()
) -> list[dict]:
    """Per workload: {workload, table, reference}. A row per host and trained size (the trials
    of a search are in the limits section, not here). Hosts in `emulated` are marked."""
    trials = [r for r in records if r.spec.search is None]
    by_config = defaultdict(lambda: defaultdict(lambda: {"off": [], "on": []}))
    for record in trials:
        config = record.params.replace(lms=None)
        mode = "on" if record.params.lms else "off"
        by_config[(config.workload, config.hash, config.describe())][record.host][mode].append(
            record
        )
    limits = _newest_searches(searches)
    workloads = sorted({w for w, _, _ in by_config} | {w for w, _, _ in limits})
    answers = []
    for workload in workloads:
        configs = sorted(key for key in by_config if key[0] == workload)
        hosts = sorted(
            {h for key in configs for h in by_config[key]}
            | {h for w, h, _ in limits if w == workload}
        )
        rows, reference = [], None
        for key in configs or [(workload, None, DASH)]:
            by_host = by_config.get(key, {})
            # the reference: the first host (alphabetically) whose LMS-on (else off) trials trained
            mode = "on" if any(process_rates(m["on"]) for m in by_host.values()) else "off"
            reference = next((h for h in sorted(by_host) if process_rates(by_host[h][mode])), None)
            for host in hosts:
                runs = by_host.get(host, {"off": [], "on": []})
                off_rates, on_rates = process_rates(runs["off"]), process_rates(runs["on"])
                lms_cost = (
                    ratio_text(ratio_interval(on_rates, off_rates))
                    if off_rates and on_rates
                    else DASH
                )
                if host == reference:
                    versus = "reference"
                elif reference and process_rates(runs[mode]):
                    reference_rates = process_rates(by_host[reference][mode])
                    versus = ratio_text(ratio_interval(process_rates(runs[mode]), reference_rates))
                else:
                    versus = DASH
                searched = {
                    kind: limits.get((workload, host, kind), {})
                    for kind in ("max-resolution", "max-batch")
                }
                rows.append(
                    [
                        f"{host} ⚠ emulated" if host in emulated else host,
                        key[2].removeprefix(f"{workload} "),
                        rate_text(runs["off"]) if runs["off"] else DASH,
                        rate_text(runs["on"]) if runs["on"] else DASH,
                        lms_cost,
                        _limit_cell(*(searched["max-resolution"].get(m) for m in ("off", "on"))),
                        _limit_cell(*(searched["max-batch"].get(m) for m in ("off", "on"))),
                        versus if len(hosts) > 1 else DASH,
                    ]
                )
        headers = [
            "host",
            "size",
            "images/sec LMS off",
            "images/sec LMS on",
            "LMS on / off",
            "max resolution off → on",
            "max batch off → on",
            f"vs {reference} (LMS {mode})" if reference else "vs reference",
        ]
        table = tabulate(rows, headers, tablefmt="github", disable_numparse=True)
        answers.append({"workload": workload, "table": table, "reference": reference})
    return answers
