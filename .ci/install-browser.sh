#!/bin/sh
# Install headless Chromium and its WebDriver for tests/test_browser.py (Debian packages).
# Idempotent: does nothing when both are already on PATH.
set -eu
if command -v chromium >/dev/null 2>&1 && command -v chromedriver >/dev/null 2>&1; then
    exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO="sudo"
fi
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends chromium chromium-driver
command -v chromium && command -v chromedriver
