#!/usr/bin/env bash
# Creates the local accounts the adversarial tests (issue 21) run as: `mozart-intruder`, a
# hostile second user on the same machine, and `mozart-victim`, an unprivileged owner for the
# cases where the owner must not be root (the /tmp fallback socket directory).
# Needs root (CI runs as root). Idempotent.
set -euo pipefail
if [ "$(id -u)" -ne 0 ]; then
  echo "security setup: not root; the tests that need a second local user will be skipped" >&2
  [ -n "${CI:-}" ] && exit 1
  exit 0
fi
for user in mozart-intruder mozart-victim; do
  if ! id -u "$user" >/dev/null 2>&1; then
    useradd --create-home --shell /bin/sh "$user"
  fi
  id "$user"
done
