#!/usr/bin/env bash
# Headless Chromium for the report and leaderboard browser tests, from Debian's packages.
# Idempotent: does nothing when /usr/bin/chromium exists. Needs root (CI runs as root).
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
    exit 0
fi
if [ "$(id -u)" != "0" ]; then
    echo "scripts/install_browser.sh: chromium is missing; run this script as root (apt-get install chromium)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core >/dev/null
chromium --version
