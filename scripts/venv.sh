#!/usr/bin/env bash
# Usage: scripts/venv.sh DIR EXTRAS
# Create (or bring up to date) the virtualenv DIR with this project installed in editable mode
# with the given extras (e.g. "cpu,dev"). Re-installs only when pyproject.toml changed.
set -euo pipefail
dir=$1 extras=$2
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
if [ ! -x "$dir/bin/python" ]; then
  echo "creating $dir (Python: $("$python" --version 2>&1))" >&2
  "$python" -m venv "$dir"
fi
stamp="$dir/.installed-$(sha256sum "$root/pyproject.toml" | cut -c1-16)-${extras//,/-}"
if [ ! -f "$stamp" ]; then
  echo "installing lms-bench[$extras] into $dir (first time: several minutes)" >&2
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -e "$root[$extras]"
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
