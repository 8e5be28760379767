#!/usr/bin/env bash
# Device-layer check for a machine with a GPU:
#   1. builds kvtier and the test_gpu_* suites (Release, warnings as errors);
#   2. asks `kvtier version` which backend AUTO selects (CUDA, else HIP);
#   3. runs the backend conformance suite with that backend required (a
#      missing device then fails instead of skipping), plus the host suites;
#   4. runs `kvtier bench gather` on that backend and on the host backend;
#   5. runs the copy-path sweep (kvt_gpu_sweep: segment size x segment count
#      x direction x path -- kernel, batch, per-segment, and AUTO's choice --
#      and pinned host allocation per GiB) on that backend;
#   6. prints a short table and writes it, with the sweep and the machine, as
#      a markdown section to OUT/gpu-check.md for docs/performance.md.
# Usage: tools/gpu-check.sh [--build-dir DIR] [--out DIR] [--backend cuda|hip]
#                           [--quick] [--require-device] [--jobs N]
# Exit: 0 checked (or no device and --require-device not given), 1 a build,
# test or bench failed (or no device with --require-device), 2 bad usage.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

build="build-gpu-check"
out="gpu-check-out"
want=
quick=0
require=0
jobs=$(nproc 2>/dev/null || echo 2)

while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) [ $# -ge 2 ] || { echo "gpu-check: --build-dir needs a value" >&2; exit 2; }; build=$2; shift 2 ;;
        --out) [ $# -ge 2 ] || { echo "gpu-check: --out needs a value" >&2; exit 2; }; out=$2; shift 2 ;;
        --backend)
            [ $# -ge 2 ] || { echo "gpu-check: --backend needs a value" >&2; exit 2; }
            case "$2" in cuda|hip) want=$2 ;; *) echo "gpu-check: bad value '$2' for --backend (cuda or hip)" >&2; exit 2 ;; esac
            shift 2 ;;
        --quick) quick=1; shift ;;
        --require-device) require=1; shift ;;
        --jobs)
            if [ $# -lt 2 ] || ! [[ $2 =~ ^[1-9][0-9]*$ ]]; then
                echo "gpu-check: bad value for --jobs" >&2; exit 2
            fi
            jobs=$2; shift 2 ;;
        -h|--help) sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "gpu-check: unknown argument '$1'" >&2; exit 2 ;;
    esac
done

mkdir -p "$out" || { echo "gpu-check: cannot create $out" >&2; exit 1; }
log="$out/gpu-check.log"
: >"$log"
say() { echo "$*" | tee -a "$log"; }

# ---- 1. build -------------------------------------------------------------
# The test_gpu_* suites need only the device layer; kvtier links every area,
# so a break elsewhere costs the bench, not the conformance run.
say "== build ($build, Release)"
tests=(test_gpu_conformance test_gpu_kernel test_gpu_devrt test_gpu_sim test_gpu_faults test_gpu_pool test_gpu_open)
if ! cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DKVTIER_WERROR=ON >>"$log" 2>&1; then
    say "gpu-check: cmake configure failed (see $log)"; exit 1
fi
grep -a "kvtier: HIP backend" "$log" | tail -n 1
if ! cmake --build "$build" -j"$jobs" --target "${tests[@]}" >>"$log" 2>&1; then
    say "gpu-check: building the device-layer tests failed (see $log)"; tail -n 30 "$log"; exit 1
fi
rc=0
have_kvtier=1
if ! cmake --build "$build" -j"$jobs" --target kvtier kvt_gpu_sweep >>"$log" 2>&1; then
    say "gpu-check: building kvtier failed (see $log); no version probe, no bench"
    grep -a -m5 'error' "$log"
    have_kvtier=0
    rc=1
fi

# ---- 2. which device -------------------------------------------------------
auto=
compiled=
if [ $have_kvtier -eq 1 ]; then
    version=$("$build/kvtier" version 2>&1)
    echo "$version" | tee -a "$log"
    auto=$(echo "$version" | sed -n 's/^AUTO selects: \([a-z]*\).*/\1/p')
    compiled=$(echo "$version" | sed -n 's/^device backends compiled in: //p')
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
    auto=cuda
elif command -v rocminfo >/dev/null 2>&1 && rocminfo 2>/dev/null | grep -q 'gfx'; then
    auto=hip
fi
backend=${want:-$auto}
if [ "$backend" != cuda ] && [ "$backend" != hip ]; then
    say "gpu-check: no CUDA or HIP device usable on this machine (AUTO selects '${auto:-?}')."
    say "gpu-check: compiled in: ${compiled:-?}. Nothing device-specific to check here."
    [ $require -eq 1 ] && exit 1
    exit $rc
fi
if [ -n "$compiled" ] && ! echo " $compiled " | grep -q " $backend "; then
    say "gpu-check: backend $backend is not compiled into this build (compiled in: $compiled)"
    exit 1
fi
device_info=
if [ "$backend" = cuda ] && command -v nvidia-smi >/dev/null 2>&1; then
    device_info=$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | head -n 1)
elif [ "$backend" = hip ] && command -v rocm-smi >/dev/null 2>&1; then
    device_info=$(rocm-smi --showproductname 2>/dev/null | grep -m1 -i 'card series' | sed 's/.*: *//')
fi
say "== device: $backend ${device_info:+($device_info)}"

# ---- 3. conformance ----------------------------------------------------------
declare -A synth
for t in "${tests[@]}"; do
    tlog="$out/$t.log"
    (cd "$build" && KVT_TEST_REQUIRE_DEVICE=$backend "./$t" --jobs "$jobs" --color=never) >"$tlog" 2>&1
    status=$?
    line=$(grep -a 'Synthesis:' "$tlog" | tail -n 1 | sed 's/.*Synthesis: //')
    synth[$t]="${line:-no Synthesis line, exit $status}"
    say "$(printf '%-22s %s' "$t" "${synth[$t]}")"
    if [ $status -ne 0 ]; then
        rc=1
        grep -a -B2 -A6 'FAIL\|Assertion' "$tlog" | head -n 60 | tee -a "$log"
    fi
done
skipped=$(grep -ac "^\[SKIP\].*$backend" "$out/test_gpu_conformance.log" || true)
[ "$skipped" -gt 0 ] && { say "gpu-check: $skipped $backend conformance tests were skipped"; rc=1; }

# ---- 4. bench ---------------------------------------------------------------
bench_flags=()
[ $quick -eq 1 ] && bench_flags=(--rounds 7 --round-ms 20 --pool 512MiB --ring 256MiB)
for b in "$backend" host; do
    [ $have_kvtier -eq 1 ] || break
    say "== kvtier bench gather --backend $b"
    if ! "$build/kvtier" bench gather --backend "$b" "${bench_flags[@]}" \
            --json "$out/bench-gather-$b.json" 2>&1 | tee -a "$log"; then
        say "gpu-check: bench gather --backend $b failed"; rc=1
    fi
done

# ---- 5. copy-path sweep ---------------------------------------------------------
sweep_flags=()
[ $quick -eq 1 ] && sweep_flags=(--quick --reps 5)
if [ $have_kvtier -eq 1 ]; then
    say "== copy-path sweep on $backend"
    if ! "$build/kvt_gpu_sweep" --backend "$backend" "${sweep_flags[@]}" >"$out/sweep-$backend.md" \
            2>>"$log"; then
        say "gpu-check: the copy-path sweep failed"; rc=1
    fi
    cat "$out/sweep-$backend.md" | tee -a "$log"
fi

# ---- 6. table -----------------------------------------------------------------
# Reads a per-size figure: the line of block_KiB $2, field $3.
size_num() { grep "\"block_KiB\": $2," "$1" | sed -n "s/.*\"$3\": \([0-9.]*\).*/\1/p"; }

table() {
    printf '| backend | block | gather GB/s | baseline GB/s | ratio | scatter GB/s | baseline GB/s | ratio |\n'
    printf '|---|---|---|---|---|---|---|---|\n'
    for b in "$backend" host; do
        j="$out/bench-gather-$b.json"
        [ -f "$j" ] || continue
        for k in 16 64 256; do
            printf '| %s | %s KiB | %s | %s | %s | %s | %s | %s |\n' "$b" "$k" \
                "$(size_num "$j" $k gather_GBps)" "$(size_num "$j" $k memcpy_GBps)" \
                "$(size_num "$j" $k gather_ratio)" "$(size_num "$j" $k scatter_GBps)" \
                "$(size_num "$j" $k memcpy_to_pool_GBps)" "$(size_num "$j" $k scatter_ratio)"
        done
    done
}

cpu=$(grep -m1 'model name' /proc/cpuinfo 2>/dev/null | sed 's/.*: *//')
mem=$(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo 2>/dev/null)
{
    echo "### gpu-check: $(date -u +%Y-%m-%d) on $backend${device_info:+ ($device_info)}"
    echo
    echo "Machine: $(nproc) CPUs ($cpu), $mem; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')."
    echo "Baseline on $backend: one contiguous device<->pinned copy of the same bytes on the"
    echo "same stream; on host: memcpy of the same bytes. Ratios are medians of paired runs."
    echo
    echo "Conformance ($backend required):"
    for t in "${tests[@]}"; do
        echo "* $t: ${synth[$t]}"
    done
    echo
    table
    if [ -s "$out/sweep-$backend.md" ]; then
        echo
        echo "Copy paths (kvt_gpu_sweep; one plane, one layer, every other block so no"
        echo "segments merge; mean of the runs after one warm-up):"
        echo
        cat "$out/sweep-$backend.md"
    fi
} >"$out/gpu-check.md"

echo
table
echo
if [ $rc -eq 0 ]; then
    say "gpu-check: passed. Paste $out/gpu-check.md into docs/performance.md."
else
    say "gpu-check: FAILED (logs in $out/)."
fi
exit $rc
