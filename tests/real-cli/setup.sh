#!/usr/bin/env bash
# Installs the real AI CLIs that tests/tests/real_cli_*.rs drive (issue 13), pinned by the
# committed package.json + package-lock.json, into <target>/real-cli/node_modules.
#
# Versions (all newest at the time of pinning, all installed from the npm registry alone):
#   @anthropic-ai/claude-code 2.1.331  native binary from the optional dependency
#                                      @anthropic-ai/claude-code-linux-x64 (npm registry),
#                                      linked by its postinstall `node install.cjs`
#   @google/gemini-cli        0.61.0   bundled JavaScript (node-pty is optional and unused)
#   @openai/codex             0.169.0  native binary from the optional dependency
#                                      @openai/codex-linux-x64 (npm registry)
# Nothing is downloaded from anywhere but the registry.
#
# Idempotent and cached: a stamp holding the lock file's hash makes a second run a no-op.
# Without node/npm it prints why and exits 0: the real-CLI tests then skip with a reason.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
dest="$target/real-cli"

if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "real-cli setup: node/npm not found; the real-CLI tests will be skipped" >&2
  # On CI a test that cannot run fails the run: say so here, where the cause is plain.
  [ -n "${CI:-}" ] && exit 1
  exit 0
fi

want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ -f "$dest/.stamp" ] && [ "$(cat "$dest/.stamp")" = "$want" ] \
  && [ -x "$dest/node_modules/.bin/claude" ] && [ -x "$dest/node_modules/.bin/gemini" ] \
  && [ -x "$dest/node_modules/.bin/codex" ]; then
  echo "real-cli setup: cached in $dest"
  exit 0
fi

mkdir -p "$dest"
cp "$here/package.json" "$here/package-lock.json" "$dest/"
cd "$dest"
rm -f .stamp
# --ignore-scripts would skip claude's postinstall, which links its native binary; node-pty's
# native build (gemini's optional terminal) may fail without a compiler and is not needed.
npm ci --no-audit --no-fund --loglevel=error
for cli in claude gemini codex; do
  "node_modules/.bin/$cli" --version >/dev/null
done
echo "$want" > .stamp
echo "real-cli setup: installed in $dest ($(node_modules/.bin/claude --version | head -1); gemini $(node_modules/.bin/gemini --version); $(node_modules/.bin/codex --version))"
