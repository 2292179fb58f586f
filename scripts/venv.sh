#!/usr/bin/env bash
# Usage: scripts/venv.sh DIR EXTRAS
# Create (or bring up to date) the virtualenv DIR with this project installed in editable mode
# with the given extras (e.g. "cpu,dev"): the lms library from lms/ (its own distribution,
# tf-lms, which the suite requires; not on PyPI, so it is named here, in the same pip call) and
# the suite from the root. Re-installs only when either pyproject.toml changed. A DIR
# left broken by an interrupted or failed first setup (no working python or pip in it) is
# removed and made again; a failed install leaves no stamp, so the next call installs again.
set -euo pipefail
dir=$1 extras=$2
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
if [ -e "$dir" ] && ! "$dir/bin/python" -m pip --version >/dev/null 2>&1; then
  echo "$dir is incomplete (no working python or pip in it): making it again" >&2
  rm -rf "$dir"
fi
if [ ! -x "$dir/bin/python" ]; then
  echo "creating $dir (Python: $("$python" --version 2>&1))" >&2
  if ! "$python" -m venv "$dir"; then
    rm -rf "$dir"
    echo "could not create a virtualenv with $python: install python3-venv (Debian:" \
      "apt-get install python3-venv) or point PYTHON at a Python 3.11-3.13" >&2
    exit 1
  fi
fi
hash=$(cat "$root/pyproject.toml" "$root/lms/pyproject.toml" | sha256sum | cut -c1-16)
stamp="$dir/.installed-$hash-${extras//,/-}"
if [ ! -f "$stamp" ]; then
  echo "installing tf-lms and lms-bench[$extras] into $dir (first time: several minutes)" >&2
  "$dir/bin/python" -m pip install -q --disable-pip-version-check -e "$root/lms" -e "$root[$extras]"
  rm -f "$dir"/.installed-*
  touch "$stamp"
fi
