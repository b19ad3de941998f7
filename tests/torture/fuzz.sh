#!/usr/bin/env bash
# Run every Mozart fuzz target (fuzz/fuzz_targets) for a bounded time each.
#
#   tests/torture/fuzz.sh                 # 60 s per target, all targets
#   FUZZ_SECONDS=300 tests/torture/fuzz.sh score_load skip_expr
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`). libFuzzer's -Z flags need a nightly
# compiler: `+nightly` is used when a nightly toolchain is installed, otherwise the stable
# toolchain with RUSTC_BOOTSTRAP=1 (cargo-fuzz accepts it; see docs/reliability.md).
# New corpus entries go to fuzz/corpus-work/<target> (git-ignored); the committed seeds in
# fuzz/corpus/<target> are only read. Crashes land in fuzz/artifacts/<target>/ and make the
# script exit non-zero after all targets ran.
set -u

repo="$(cd "$(dirname "$0")/../.." && pwd)"
seconds="${FUZZ_SECONDS:-60}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$repo/fuzz/target}"

if [ "$#" -gt 0 ]; then
    targets=("$@")
else
    targets=(score_load rpc_line claude_output classify skip_expr)
fi

if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    cargo=(cargo +nightly fuzz)
else
    export RUSTC_BOOTSTRAP=1
    cargo=(cargo fuzz)
fi

cd "$repo" || exit 2
failed=()
for target in "${targets[@]}"; do
    work="fuzz/corpus-work/$target"
    mkdir -p "$work" "fuzz/corpus/$target"
    echo "=== $target: ${seconds}s ==="
    # -rss_limit_mb: a score that plans a billion sheets must fail, not eat the machine.
    # -timeout: one input taking > 10 s is a hang worth reporting.
    if ! "${cargo[@]}" run --fuzz-dir fuzz "$target" "$work" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
        -print_final_stats=1; then
        failed+=("$target")
    fi
done

if [ "${#failed[@]}" -gt 0 ]; then
    echo "FAILED targets: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
    exit 1
fi
echo "all targets ran ${seconds}s without a crash"
