#!/usr/bin/env bash
# The whole test suite, as `make check` runs it:
#   1. clang-format check of every tracked C file
#   2. warnings-as-errors build, every Criterion binary
#   3. ASan + UBSan build, every Criterion binary
#   4. TSan build, the binaries whose code runs threads (runtime, gpu, store, replay,
#      ranks, lanes, worker, benchmarks, actors, fence board)
#      (Criterion cannot run under TSan: these link the stand-in in tests/tsan)
# Usage: tools/check.sh [format|plain|asan|tsan]...   (default: all stages)
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(format plain asan tsan)
failed=()

stage_format() {
    echo "== format"
    local bad
    bad=$(git ls-files '*.c' '*.h' | while read -r f; do
        [ -f "$f" ] || continue
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
    done)
    if [ -n "$bad" ]; then
        echo "clang-format would change:"; echo "$bad" | sed 's/^/  /'
        echo "run 'make format'"
        return 1
    fi
    echo "format: ok"
}

build() { # dir flags...
    local dir=$1; shift
    cmake -S . -B "$dir" -DKVTIER_WERROR=ON "$@" >/dev/null || return 1
    # The filter always succeeds and PIPESTATUS[0] decides: a `|| true` after
    # the whole pipeline would, under pipefail, hide a failed build.
    cmake --build "$dir" -j"$JOBS" 2>&1 | { grep -Ev '^\[ *[0-9]+%\]|^g?make(\[[0-9]+\])?: (Entering|Leaving) directory' || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ]
}

stage_build_and_test() { # name dir pattern flags...
    local name=$1 dir=$2 pattern=$3; shift 3
    echo "== $name: build ($dir)"
    build "$dir" "$@" || { echo "$name: build failed"; return 1; }
    echo "== $name: tests"
    tools/run-tests.sh "$dir" "$pattern"
}

for s in "${stages[@]}"; do
    case "$s" in
        format) stage_format || failed+=(format) ;;
        plain) stage_build_and_test plain build 'test_*' || failed+=(plain) ;;
        asan) ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                stage_build_and_test asan build-asan 'test_*' -DKVTIER_ASAN=ON || failed+=(asan) ;;
        tsan) TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
                stage_build_and_test tsan build-tsan 'test_@(runtime|gpu|store|replay|rank|lane|worker|bench|actors|fence)*' -DKVTIER_TSAN=ON || failed+=(tsan) ;;
        *) echo "unknown stage $s"; exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "== check FAILED: ${failed[*]}"
    exit 1
fi
echo "== check passed (${stages[*]})"
