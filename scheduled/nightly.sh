#!/usr/bin/env bash
# The scheduled regression run: build the image, run the spec on the hosts, render the report,
# check for regressions against the baseline, write the history of every stored run (each run
# against the one before and the baseline, what changed where), publish the report and the
# history, and exit non-zero if there was a regression (or the history could not be written). Run it from cron, a systemd timer or CI:
#   30 2 * * * cd /srv/lms-bench && scheduled/nightly.sh >> /var/log/lms-nightly.log 2>&1
# Settings (environment):
#   LMS_SPEC     spec to run (default: smoke)
#   LMS_HOSTS    Docker hosts for `inv run --hosts` (default: local); empty: run natively,
#                without building an image
#   LMS_RESULTS, LMS_REPORTS, LMS_PUBLISH, LMS_BASELINE   directories/files (invoke.yaml defaults)
# Every night measures anew (`inv run --force`): its records form a new run beside the earlier
# ones, and `inv regress` compares the newest run with the baseline. The first run has no
# baseline: it makes one from its own results (accept later ones with `inv baseline` after
# reviewing them).
set -uo pipefail
cd "$(dirname "$0")/.."
spec=${LMS_SPEC:-smoke}
hosts=${LMS_HOSTS-local}
opt() { [ -n "${2:-}" ] && printf -- '--%s=%s' "$1" "$2"; }
results=$(opt results "${LMS_RESULTS:-}")
reports=$(opt output "${LMS_REPORTS:-}")
baseline_file=${LMS_BASELINE:-baselines/baseline.json}
set -e
if [ -n "$hosts" ]; then
  ./inv build --arch x86_64
  ./inv run --force --spec "$spec" --hosts "$hosts" $results
else
  ./inv run --force --spec "$spec" $results
fi
if [ ! -f "$baseline_file" ]; then
  ./inv baseline $results --output "$baseline_file"
fi
set +e
./inv regress $results --baseline "$baseline_file" $reports
regress_status=$?
set -e
./inv report $results $reports
# the history of every stored run beside the report (its history/ folder: the CI artifact); a
# night whose history fails is still published, and says so in its exit status
set +e
./inv history $results --baseline "$baseline_file" $(opt output "${LMS_REPORTS:+$LMS_REPORTS/history}")
history_status=$?
set -e
# the site: this night's report, and the history rebuilt from the same results and baseline
./inv publish $(opt reports "${LMS_REPORTS:-}") $(opt to "${LMS_PUBLISH:-}") $results \
  --baseline "$baseline_file"
[ "$regress_status" -ne 0 ] && exit "$regress_status"
exit $history_status
