#!/usr/bin/env bash
# The system programs two tests drive for real, from Debian's packages: the trace viewer's
# headless Chromium (chromium, chromium-driver) and the replicas' load balancer (haproxy).
# Installed here when missing and this is a root Debian shell; otherwise a note says how
# (the tests then say they cannot run).
set -euo pipefail
missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v chromedriver >/dev/null || missing+=(chromium-driver)
command -v haproxy >/dev/null || [ -x /usr/sbin/haproxy ] || missing+=(haproxy)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "note: the viewer's and the balancer's tests need Debian's ${missing[*]}:" >&2
    echo "      sudo apt-get install ${missing[*]}" >&2
    exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && apt-get install -y -q "${missing[@]}" >/dev/null; }
