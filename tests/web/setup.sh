#!/usr/bin/env bash
# Installs what the dashboard and MCP tests need (idempotent, quick when already done):
#  - Debian's chromium (apt-get), driven headless by the browser test;
#  - npm's playwright-core into tests/web/node_modules (versions pinned by package-lock.json;
#    it drives the system chromium, it never downloads a browser);
#  - a Python venv in tests/web/.venv with the official `mcp` client package from PyPI.
# A step that cannot be done prints why and goes on: the tests then skip with a reason.
# With CI set, the script still does every step but exits 1 if any failed.
set -uo pipefail
cd "$(dirname "$0")"
failed=0

if ! command -v chromium >/dev/null 2>&1; then
  echo "web setup: installing chromium (apt-get)"
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }; then
    echo "web setup: could not install chromium; the browser test will skip" >&2
    failed=1
  fi
fi

if command -v npm >/dev/null 2>&1; then
  if [ ! -f node_modules/playwright-core/package.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
    echo "web setup: installing playwright-core (npm ci)"
    PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --silent \
      || { echo "web setup: npm ci failed; the browser test will skip" >&2; failed=1; }
  fi
else
  echo "web setup: npm not found; the browser test will skip" >&2
  failed=1
fi

if command -v python3 >/dev/null 2>&1; then
  if [ ! -x .venv/bin/python ] || ! .venv/bin/python -c 'import mcp' >/dev/null 2>&1; then
    echo "web setup: creating the Python venv with the mcp package (pip)"
    { python3 -m venv .venv && .venv/bin/pip install -q --disable-pip-version-check -r requirements.txt; } \
      || { echo "web setup: the mcp venv could not be made; the MCP test will skip" >&2; failed=1; }
  fi
else
  echo "web setup: python3 not found; the MCP test will skip" >&2
  failed=1
fi
if [ "$failed" -ne 0 ] && [ -n "${CI:-}" ]; then
  echo "web setup: FAILED on CI (see above)" >&2
  exit 1
fi
exit 0
