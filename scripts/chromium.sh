#!/usr/bin/env bash
# Make a headless browser usable here, for the test that loads the published site as a reader
# does (tests/system/test_site.py): install Debian's chromium, and a font for it to draw text
# with, if missing. Nothing else: the test drives it over the DevTools pipe, no browser library.
set -euo pipefail
need=()
command -v chromium >/dev/null || need+=(chromium)
find /usr/share/fonts -name '*.ttf' -print -quit 2>/dev/null | grep -q . || need+=(fonts-dejavu-core)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "scripts/chromium.sh: missing ${need[*]}; install them as root (apt-get install ${need[*]})" >&2
    exit 1
  fi
  echo "scripts/chromium.sh: installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# the launcher's /etc/chromium.d snippets may warn on stderr: only the version line
echo "scripts/chromium.sh: $(chromium --version 2>/dev/null | head -1) ready"
