#!/usr/bin/env bash
# Runs every Criterion test binary in a build directory that matches a glob
# (extglob allowed), printing each binary's Synthesis line with its wall and
# CPU (user + sys, the binary and the processes it forked) seconds; on a
# failure it prints that binary's whole output. Exits non-zero if any binary
# failed. Each binary's times are also left in $dir/test-logs/<name>.time
# ("wall user sys", seconds) and the run closes with the binaries that took
# the most CPU, so a CI log shows where the minutes go.
#
# KVT_TEST_PARALLEL=N runs N binaries at once (default 1). The lines are still
# printed in one fixed order, each once its binary and every binary before it
# have finished, so the log reads the same whatever finishes first.
# Binaries run longest first: by the wall time a previous run left in
# test-logs/*.time, else alphabetically (the order matters only when N > 1).
set -uo pipefail
shopt -s extglob
dir=${1:-build}
pattern=${2:-test_*}
jobs=${CRITERION_JOBS:-2}
par=${KVT_TEST_PARALLEL:-1}
[[ $par =~ ^[1-9][0-9]*$ ]] || { echo "KVT_TEST_PARALLEL must be a positive integer, not '$par'"; exit 2; }
logdir="$dir/test-logs"
mkdir -p "$logdir"
rc=0
# One line per failed binary, for check.sh's closing summary (a CI log is
# often read from its tail, far below the failing binary's full output).
: >"$logdir/FAILED"

names=()
for bin in "$dir"/test_*; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    name=$(basename "$bin")
    # shellcheck disable=SC2053
    [[ $name == $pattern ]] || continue
    names+=("$name")
done
if [ ${#names[@]} -eq 0 ]; then
    echo "no test binaries matching $pattern in $dir"
    exit 1
fi

# Longest first, by the last recorded wall time (unknown: 0, kept alphabetical).
if [ "$par" -gt 1 ]; then
    mapfile -t names < <(for name in "${names[@]}"; do
        w=0
        [ -s "$logdir/$name.time" ] && read -r w _ <"$logdir/$name.time"
        [[ $w =~ ^[0-9.]+$ ]] || w=0
        printf '%s %s\n' "$w" "$name"
    done | sort -k1,1nr -k2,2 -s | cut -d' ' -f2)
fi

run_one() { # name: its output in .log, its exit status in .rc, its times in .time
    local name=$1 TIMEFORMAT='%R %U %S'
    rm -f "$logdir/$name.time"
    # bash's `time` reports the subshell's wall and the CPU of every process
    # it waited for (Criterion's workers and whatever a test forks).
    { time (cd "$dir" && "./$name" --jobs "$jobs" --color=never >"test-logs/$name.log" 2>&1); } 2>"$logdir/$name.time.tmp"
    echo $? >"$logdir/$name.rc.tmp"
    tail -n 1 "$logdir/$name.time.tmp" >"$logdir/$name.time"
    rm -f "$logdir/$name.time.tmp"
    mv "$logdir/$name.rc.tmp" "$logdir/$name.rc"
}

report() { # name: the Synthesis line, and on a failure the output
    local name=$1 log status synth w u s t key
    log="$logdir/$name.log"
    status=$(cat "$logdir/$name.rc")
    read -r w u s <"$logdir/$name.time"
    t=$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')
    synth=$(grep -a 'Synthesis:' "$log" | tail -n 1)
    printf '%-28s %s  [wall %ss cpu %ss]\n' "$name" "${synth:-[no Synthesis line] exit $status}" "${w%?}" "$t"
    if [ "$status" -ne 0 ]; then
        rc=1
        echo "---- $name output (exit $status) ----"
        grep -av '^\[----\]\|^\[RUN \]\|^\[PASS\]' "$log" | tail -n 80
        echo "----"
        key=$(grep -aE -m 6 'ThreadSanitizer|AddressSanitizer|runtime error|SUMMARY|\[FAIL\]|Assertion|CRASH|Timeout|^ +#[0-2] ' "$log" |
            tr -s ' ' | cut -c1-160 | paste -sd '|' -)
        echo "$name exit $status: ${synth:-no Synthesis line} ${key:+-- $key}" >>"$logdir/FAILED"
    fi
}

for name in "${names[@]}"; do rm -f "$logdir/$name.rc"; done
start=$SECONDS
next=0    # the next binary to start
shown=0   # the next binary to report
running=0
total=${#names[@]}
while [ $shown -lt "$total" ]; do
    while [ $running -lt "$par" ] && [ $next -lt "$total" ]; do
        run_one "${names[$next]}" &
        next=$((next + 1))
        running=$((running + 1))
    done
    wait -n
    running=$((running - 1))
    while [ $shown -lt "$total" ] && [ -f "$logdir/${names[$shown]}.rc" ]; do
        report "${names[$shown]}"
        shown=$((shown + 1))
    done
done
wait

# The binaries by CPU, and the totals.
for name in "${names[@]}"; do
    read -r w u s <"$logdir/$name.time"
    printf '%s %s %s\n' "$name" "$w" "$(awk -v u="$u" -v s="$s" 'BEGIN { printf "%.1f", u + s }')"
done | sort -k3,3nr | awk -v n="$total" -v el=$((SECONDS - start)) -v d="$dir" '
    { cpu += $3; wall += $2; if (NR <= 8) top = top sprintf("  %-28s cpu %7.1fs  wall %7.1fs\n", $1, $3, $2) }
    END { printf "%s: %d binaries in %ds wall, %.0fs CPU (sum of binaries: %.0fs wall); most CPU:\n%s", d, n, el, cpu, wall, top }'
exit $rc
