#!/usr/bin/env bash
# The whole test suite, as `make check` runs it:
#   1. clang-format check of every tracked C file
#   2. warnings-as-errors build, every Criterion binary (two at a time)
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
    local bad files=()
    # One clang-format over every file (a process per file was 90 s of wall
    # on a loaded 2-core machine, for 316 files); only when it finds something
    # does a process per file name the files.
    mapfile -t files < <(git ls-files '*.c' '*.h' | while read -r f; do [ -f "$f" ] && echo "$f"; done)
    [ ${#files[@]} -eq 0 ] && { echo "format: no C files"; return 0; }
    clang-format --dry-run --Werror "${files[@]}" >/dev/null 2>&1 && { echo "format: ok (${#files[@]} files)"; return 0; }
    bad=$(for f in "${files[@]}"; do
        clang-format --dry-run --Werror "$f" >/dev/null 2>&1 || echo "$f"
    done)
    [ -n "$bad" ] || bad="(clang-format failed over the whole list, on no single file)"
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

# CPU seconds (user + sys) this shell and every process it has waited for have
# used so far, from bash's `times` ("0m1.250s 0m0.030s", shell then children).
# `times` runs in this shell (its output to a file: in a $(...) it would
# report the subshell's own, empty, times).
times_file=$(mktemp "${TMPDIR:-/tmp}/kvt-check-times-XXXXXX") || exit 2
trap 'rm -f "$times_file"' EXIT
cpu_now() { # sets CPU
    times >"$times_file"
    CPU=$(awk '{ for (i = 1; i <= NF; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] } } END { printf "%.1f", t }' "$times_file")
}
stage_times=()
check_start=$SECONDS
cpu_now
check_cpu0=$CPU
for s in "${stages[@]}"; do
    t0=$SECONDS
    cpu_now
    c0=$CPU
    case "$s" in
        format) stage_format || failed+=(format) ;;
        # The plain stage runs two binaries at once (KVT_TEST_PARALLEL, see
        # run-tests.sh): its binaries wait on modelled time and sockets far
        # more than they compute (wall twice their CPU). The sanitizer stages
        # run one at a time: their timeouts are sized for one.
        plain) KVT_TEST_PARALLEL=${KVT_TEST_PARALLEL:-2} stage_build_and_test plain build 'test_*' || failed+=(plain) ;;
        asan) ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
                stage_build_and_test asan build-asan 'test_*' -DKVTIER_ASAN=ON || failed+=(asan) ;;
        tsan) TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
                stage_build_and_test tsan build-tsan 'test_@(runtime|gpu|store|replay|rank|lane|worker|bench|actors|fence)*' -DKVTIER_TSAN=ON || failed+=(tsan) ;;
        release) stage_build_and_smoke release build-release Release || failed+=(release) ;;
        debug) stage_build_and_smoke debug build-debug Debug || failed+=(debug) ;;
        fuzz) stage_fuzz || failed+=(fuzz) ;;
        *) echo "unknown stage $s"; exit 2 ;;
    esac
    cpu_now
    line=$(printf '%-8s wall %5ds  cpu %7.1fs' "$s" $((SECONDS - t0)) "$(awk -v a="$c0" -v b="$CPU" 'BEGIN { print b - a }')")
    echo "== $line"
    stage_times+=("$line")
done
echo "== stage times ($(nproc 2>/dev/null || echo '?') CPUs, JOBS=$JOBS; cpu: user + sys of the stage's processes)"
printf '   %s\n' "${stage_times[@]}"
cpu_now
printf '   %-8s wall %5ds  cpu %7.1fs\n' total $((SECONDS - check_start)) "$(awk -v a="$check_cpu0" -v b="$CPU" 'BEGIN { print b - a }')"

if [ ${#failed[@]} -gt 0 ]; then
    echo "== check FAILED: ${failed[*]}"
    # Repeat what failed at the very end, where a truncated log still shows it.
    for d in build build-asan build-tsan; do
        [ -s "$d/test-logs/FAILED" ] && sed "s|^|$d: |" "$d/test-logs/FAILED" | cut -c1-400
    done
    exit 1
fi
echo "== check passed (${stages[*]})"
