#!/usr/bin/env bash
# Manual check: upstream's own Python CLI (Mozart AI Compose, commit ed990b3) drives OUR
# conductor over its Unix socket (issue 3; architecture.md "Paths"; conductor.md §7–§8).
#
# Not part of `cargo test`: CI has no upstream copy. Run it by hand:
#
#   tests/upstream-cli/check.sh
#
# Environment (all optional):
#   UPSTREAM_TREE  upstream source tree with pyproject.toml   (default /work/upstream-full)
#   UPSTREAM_GIT   git dir to export the tree from if missing (default /work/.mirror/Mzzkc+mozart-ai-compose/repo)
#   UPSTREAM_REV   commit to export                           (default ed990b3)
#   PYTHON312      Python 3.12 interpreter                    (default: pyenv's 3.12.1, else python3.12)
#   VENV           virtualenv for upstream's CLI              (default /work/venv-upstream)
#   MOZART_BIN     our binary                                 (default: cargo build, then target/debug/mozart)
#
# Exit status: 0 = every step matched, 1 = some step failed, 77 = skipped (no upstream/Python).
set -u

here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
UPSTREAM_TREE="${UPSTREAM_TREE:-/work/upstream-full}"
UPSTREAM_GIT="${UPSTREAM_GIT:-/work/.mirror/Mzzkc+mozart-ai-compose/repo}"
UPSTREAM_REV="${UPSTREAM_REV:-ed990b3}"
VENV="${VENV:-/work/venv-upstream}"

skip() { echo "SKIP: $*"; exit 77; }

# --- 1. prerequisites ---------------------------------------------------------------------
if [ ! -f "$UPSTREAM_TREE/pyproject.toml" ]; then
    if [ -d "$UPSTREAM_GIT" ]; then
        mkdir -p "$UPSTREAM_TREE"
        git --git-dir="$UPSTREAM_GIT" archive "$UPSTREAM_REV" | tar x -C "$UPSTREAM_TREE" \
            || skip "cannot export upstream $UPSTREAM_REV from $UPSTREAM_GIT"
    else
        skip "no upstream tree at $UPSTREAM_TREE (set UPSTREAM_TREE) and no git mirror at $UPSTREAM_GIT"
    fi
fi
PYTHON312="${PYTHON312:-}"
if [ -z "$PYTHON312" ]; then
    for candidate in /root/.pyenv/versions/3.12.1/bin/python3.12 "$(command -v python3.12 || true)"; do
        if [ -n "$candidate" ] && [ -x "$candidate" ]; then PYTHON312="$candidate"; break; fi
    done
fi
[ -n "$PYTHON312" ] || skip "Python 3.12 not found (set PYTHON312)"
if [ ! -x "$VENV/bin/mozart" ]; then
    echo "creating $VENV with upstream's CLI (pip install -e $UPSTREAM_TREE[daemon]) ..."
    "$PYTHON312" -m venv "$VENV" || skip "cannot create a venv with $PYTHON312"
    "$VENV/bin/pip" install -q -e "$UPSTREAM_TREE[daemon]" || skip "pip install of upstream failed"
fi
UP="$VENV/bin/mozart"

if [ -z "${MOZART_BIN:-}" ]; then
    (cd "$repo" && cargo build -q -p mozart-cli) || { echo "FAIL: cargo build"; exit 1; }
    MOZART_BIN="${CARGO_TARGET_DIR:-$repo/target}/debug/mozart"
fi
[ -x "$MOZART_BIN" ] || { echo "FAIL: no binary at $MOZART_BIN"; exit 1; }

# --- 2. our conductor on a clone socket upstream can find ---------------------------------
# Upstream's CLI has no --socket for job commands: it uses /tmp/mozart.sock, or
# /tmp/mozart-clone-<name>.sock with --conductor-clone=<name> (daemon/detect.py).
clone="ucli$$"
sock="/tmp/mozart-clone-$clone.sock"
work="$(mktemp -d /tmp/mozart-ucli.XXXXXX)"
export MOZART_HOME="$work/home"
mkdir -p "$MOZART_HOME" "$work/scores" "$work/pyhome"
cleanup() {
    "$MOZART_BIN" stop --force >/dev/null 2>&1 || true
    if [ -f "$MOZART_HOME/conductor.pid" ]; then
        kill "$(cat "$MOZART_HOME/conductor.pid")" 2>/dev/null || true
    fi
    rm -f "$sock"
    rm -rf "$work"
}
trap cleanup EXIT

MOZART_SOCKET="$sock" "$MOZART_BIN" start --socket "$sock" >"$work/start.log" 2>&1 \
    || { cat "$work/start.log"; echo "FAIL: our conductor did not start"; exit 1; }
for _ in $(seq 1 100); do [ -S "$sock" ] && break; sleep 0.1; done
[ -S "$sock" ] || { echo "FAIL: no socket at $sock"; exit 1; }

# Upstream's CLI keeps its own files under $HOME/.mozart: give it a scratch home.
up() { HOME="$work/pyhome" COLUMNS=200 NO_COLOR=1 "$UP" --conductor-clone="$clone" "$@"; }

failures=0
# Poll with our own (fast) CLI: wait_for JOB STATUS SECONDS.
wait_for() {
    local deadline=$((SECONDS + $3))
    while [ "$SECONDS" -lt "$deadline" ]; do
        [ "$(MOZART_SOCKET="$sock" "$MOZART_BIN" status "$1" --json 2>/dev/null \
            | python3 -c 'import json, sys; print(json.load(sys.stdin).get("status"))' 2>/dev/null)" = "$2" ] \
            && return 0
        sleep 0.5
    done
    echo "      (gave up waiting for $1 to be $2)"
}
step() { # step NAME EXPECTED_EXIT REGEX -- CMD...
    local name="$1" want_rc="$2" pattern="$3"; shift 4
    local out rc
    out="$("$@" 2>&1)"; rc=$?
    if [ "$rc" = "$want_rc" ] && printf '%s' "$out" | grep -Eq -- "$pattern"; then
        printf 'ok    %-34s (exit %s)\n' "$name" "$rc"
    else
        printf 'FAIL  %-34s (exit %s, wanted %s and /%s/)\n' "$name" "$rc" "$want_rc" "$pattern"
        printf '%s\n' "$out" | sed 's/^/      | /' | head -40
        failures=$((failures + 1))
    fi
}

# A score both validators accept: our `shell` instrument (upstream only warns V210).
# Sheets that sleep long enough that pause / resume / cancel land while the job runs (each
# upstream CLI call takes seconds to start).
cat >"$work/scores/slow.yaml" <<EOF
name: slow
workspace: $work/ws-slow
instrument: shell
sheet:
  size: 1
  total_items: 6
pause_between_sheets_seconds: 0
prompt:
  template: |
    RUN: sleep 10 && echo "sheet {{ sheet_num }}" > "{{ workspace }}/out-{{ sheet_num }}.txt"
validations:
  - type: file_exists
    path: "{workspace}/out-{sheet_num}.txt"
EOF
sed -e 's/^name: slow/name: doomed/' -e "s#ws-slow#ws-doomed#" "$work/scores/slow.yaml" >"$work/scores/doomed.yaml"
cp "$repo/examples/hello.yaml" "$work/scores/hello.yaml"
sed -i "s#^workspace: .*#workspace: $work/ws-hello#" "$work/scores/hello.yaml"

# --- 3. the commands issue 3 names ----------------------------------------------------------
step "conductor-status"            0 "Readiness: ready" -- \
    up conductor-status --pid-file "$MOZART_HOME/conductor.pid" --socket "$sock"
step "run hello"                   0 "Score submitted to conductor" -- up run "$work/scores/hello.yaml"
wait_for hello completed 60
step "status hello (completed)"    0 "COMPLETED|completed" -- up status hello
step "status hello --json"         0 '"job_id": "hello"' -- up status hello --json
step "run slow"                    0 "Score submitted to conductor" -- up run "$work/scores/slow.yaml"
step "status (overview)"           0 "slow" -- up status
step "list (active only)"          0 "slow +running" -- up list
step "list --json"                 0 '"job_id": "slow"' -- up list --json
step "pause slow"                  0 "Pause signal sent" -- up pause slow
step "status slow (paused)"        0 "PAUSED|paused" -- up status slow
step "resume slow"                 0 "resum" -- up resume slow
step "run doomed"                  0 "Score submitted to conductor" -- up run "$work/scores/doomed.yaml"
step "cancel doomed"               0 "cancelled" -- up cancel doomed
step "status doomed (cancelled)"   0 "CANCELLED|cancelled" -- up status doomed
step "cancel unknown"              1 "not found or already stopped" -- up cancel nosuchjob
step "status unknown"              1 "not found|Not found" -- up status nosuchjob
wait_for slow completed 180
step "status slow (completed)"     0 "COMPLETED|completed" -- up status slow
step "list --all"                  0 "doomed" -- up list --all

# --- 4. beyond issue 3: the other routed commands ----------------------------------------
sed -e 's/^name: slow/name: modme/' -e "s#ws-slow#ws-modme#" "$work/scores/slow.yaml" >"$work/scores/modme.yaml"
sed -e 's/echo "sheet/echo "modified sheet/' "$work/scores/modme.yaml" >"$work/scores/modme-v2.yaml"
step "run modme"                   0 "Score submitted to conductor" -- up run "$work/scores/modme.yaml"
step "modify modme --resume"       0 "Job resume queued|Will resume with" -- \
    up modify modme -c "$work/scores/modme-v2.yaml" --resume
wait_for modme completed 180
step "modify applied (workspace)"  0 "modified sheet 6" -- cat "$work/ws-modme/out-6.txt"
step "errors slow"                 0 "No errors found" -- up errors slow
step "history slow"                0 "Total: [0-9]+ record" -- up history slow
step "diagnose slow"               0 "Diagnostic Report" -- up diagnose slow
step "top --json (one snapshot)"   124 '"daemon_pid":[0-9]+.*"job_progress"' -- timeout 15 env HOME="$work/pyhome" "$UP" --conductor-clone="$clone" top --json
sed -e 's/^name: slow/name: watched/' -e "s#ws-slow#ws-watched#" "$work/scores/slow.yaml" >"$work/scores/watched.yaml"
step "run watched"                 0 "Score submitted to conductor" -- up run "$work/scores/watched.yaml"
step "top/events/monitor models"   0 "monitor.stream yields" -- \
    env HOME="$work/pyhome" "$VENV/bin/python" "$here/models.py" "$sock" watched
if ! "$VENV/bin/python" -c "import textual" 2>/dev/null; then
    "$VENV/bin/pip" install -q textual >/dev/null 2>&1 || echo "      (cannot install textual: the TUI step will fail)"
fi
step "top (upstream's TUI, headless)" 0 "TUI shows watched" -- \
    env HOME="$work/pyhome" "$VENV/bin/python" "$here/tui.py" "$sock" watched
step "cancel watched"              0 "cancelled" -- up cancel watched
step "recover slow"                0 "No failed sheets" -- up recover slow
step "config show (live)"          0 "from running conductor" -- up config show
step "clear-rate-limits"           0 "[Cc]leared|No active rate limits" -- up clear-rate-limits
step "clear --yes"                 0 "Cleared [0-9]+ score" -- up clear --yes
step "list --all after clear"      0 "No scores|0 score" -- up list --all
# Upstream's stop reads a PID file; ours lives in the Mozart home.
step "stop --pid-file"             0 "Sent SIGTERM" -- up stop --pid-file "$MOZART_HOME/conductor.pid"
for _ in $(seq 1 100); do [ -S "$sock" ] || break; sleep 0.1; done
step "conductor-status (stopped)"  1 "not running" -- \
    up conductor-status --pid-file "$MOZART_HOME/conductor.pid" --socket "$sock"

echo
if [ "$failures" -eq 0 ]; then
    echo "PASS: upstream's CLI drove our conductor through every step"
    exit 0
fi
echo "FAIL: $failures step(s) differ"
exit 1
