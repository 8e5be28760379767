#!/usr/bin/env bash
# The whole test suite, as `make check` runs it:
#   1. clang-format check of every tracked C file
#   2. warnings-as-errors build, every Criterion binary
#   3. ASan + UBSan build, every Criterion binary
#   4. TSan build, the binaries whose code runs threads (runtime, gpu, store, replay,
#      ranks, lanes, worker, benchmarks, actors, fence board)
#      (Criterion cannot run under TSan: these link the stand-in in tests/tsan)
#   5. Release and Debug builds (warnings as errors; libkvtier and the kvtier
#      command, not the test binaries, to keep the stage short), each with a
#      smoke replay (dense with small tiers so the disk serves hits, hybrid)
#      that must end with 0 wrong resumes: optimisation levels warn differently (gcc's format-truncation)
#   6. fuzz: the libFuzzer targets built with clang (build-fuzz), each run once
#      over its corpus in tests/corpus/<target> (no new inputs: -runs=0)
# Usage: tools/check.sh [format|plain|asan|tsan|release|debug|fuzz]...   (default: all stages)
set -uo pipefail
cd "$(dirname "$0")/.."
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(format plain asan tsan release debug fuzz)
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

stage_build_and_smoke() { # name dir build-type
    local name=$1 dir=$2 type=$3 tmp out
    echo "== $name: build ($dir, CMAKE_BUILD_TYPE=$type: the library, static and shared, and the kvtier command)"
    cmake -S . -B "$dir" -DKVTIER_WERROR=ON -DCMAKE_BUILD_TYPE="$type" >/dev/null || return 1
    cmake --build "$dir" -j"$JOBS" --target kvtier kvtier_shared 2>&1 |
        { grep -Ev '^\[ *[0-9]+%\]|^g?make(\[[0-9]+\])?: (Entering|Leaving) directory' || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "$name: build failed"; return 1; }
    echo "== $name: smoke replay"
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvt-smoke-XXXXXX") || return 1
    local ok=0
    for args in "--limit 300 --byte-scale 1 --hbm-pool 4MiB --cpu-pool 2MiB --disk-pool 256MiB --disk-dir $tmp/disk" "--limit 160 --model qwen3-next-like"; do
        # shellcheck disable=SC2086
        out=$("$dir/kvtier" replay $args 2>&1)
        if [ $? -ne 0 ] || ! grep -Eq '^ *wrong resumes +0$' <<<"$out"; then
            echo "$name: kvtier replay $args failed:"; echo "$out" | tail -n 20
            ok=1
        else
            echo "$name: kvtier replay $args: $(grep -E '^ *wrong resumes' <<<"$out" | xargs)"
        fi
    done
    rm -rf "$tmp"
    return $ok
}

stage_fuzz() {
    echo "== fuzz: build (build-fuzz, clang, libFuzzer + ASan + UBSan)"
    cmake -S . -B build-fuzz -DKVTIER_WERROR=ON -DCMAKE_C_COMPILER=clang -DKVTIER_FUZZ=ON >/dev/null ||
        { echo "fuzz: configure failed"; return 1; }
    local targets=() t
    for t in tests/fuzz/fuzz_*.c; do targets+=("$(basename "$t" .c)"); done
    cmake --build build-fuzz -j"$JOBS" --target "${targets[@]}" 2>&1 |
        { grep -Ev '^\[ *[0-9]+%\]|^g?make(\[[0-9]+\])?: (Entering|Leaving) directory' || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "fuzz: build failed"; return 1; }
    local rc=0
    for t in "${targets[@]}"; do
        local corpus=tests/corpus/${t#fuzz_}
        if ! build-fuzz/"$t" -runs=0 "$corpus" >build-fuzz/"$t".log 2>&1; then
            echo "fuzz: $t failed on its corpus:"; tail -n 30 build-fuzz/"$t".log
            rc=1
        else
            echo "fuzz: $t: $(grep -c . <(ls "$corpus")) corpus inputs replayed"
        fi
    done
    return $rc
}

for s in "${stages[@]}"; do
    case "$s" in
        format) stage_format || failed+=(format) ;;
        plain) stage_build_and_test plain build 'test_*' || failed+=(plain) ;;
        asan) ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                stage_build_and_test asan build-asan 'test_*' -DKVTIER_ASAN=ON || failed+=(asan) ;;
        tsan) TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
                stage_build_and_test tsan build-tsan 'test_@(runtime|gpu|store|replay|rank|lane|worker|bench|actors|fence)*' -DKVTIER_TSAN=ON || failed+=(tsan) ;;
        release) stage_build_and_smoke release build-release Release || failed+=(release) ;;
        debug) stage_build_and_smoke debug build-debug Debug || failed+=(debug) ;;
        fuzz) stage_fuzz || failed+=(fuzz) ;;
        *) echo "unknown stage $s"; exit 2 ;;
    esac
done

if [ ${#failed[@]} -gt 0 ]; then
    echo "== check FAILED: ${failed[*]}"
    # Repeat what failed at the very end, where a truncated log still shows it.
    for d in build build-asan build-tsan; do
        [ -s "$d/test-logs/FAILED" ] && sed "s|^|$d: |" "$d/test-logs/FAILED" | cut -c1-400
    done
    exit 1
fi
echo "== check passed (${stages[*]})"
