#!/usr/bin/env bash
# The trace viewer's test drives a real headless Chromium: Debian's chromium and
# chromium-driver packages. Installed here when missing and this is a root Debian shell;
# otherwise a note says how (the test then says it cannot run).
set -euo pipefail
if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: the viewer's browser test needs Debian's chromium and chromium-driver:" >&2
    echo "      sudo apt-get install chromium chromium-driver" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q chromium chromium-driver >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q chromium chromium-driver >/dev/null; }
