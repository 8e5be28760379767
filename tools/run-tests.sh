#!/usr/bin/env bash
# Runs every Criterion test binary in a build directory that matches a glob
# (extglob allowed), printing each binary's Synthesis line; on a failure it
# prints that binary's whole output. Exits non-zero if any binary failed.
set -uo pipefail
shopt -s extglob
dir=${1:-build}
pattern=${2:-test_*}
jobs=${CRITERION_JOBS:-2}
logdir="$dir/test-logs"
mkdir -p "$logdir"
rc=0
n=0
# One line per failed binary, for check.sh's closing summary (a CI log is
# often read from its tail, far below the failing binary's full output).
: >"$logdir/FAILED"
for bin in "$dir"/test_*; do
    [ -x "$bin" ] && [ -f "$bin" ] || continue
    name=$(basename "$bin")
    # shellcheck disable=SC2053
    [[ $name == $pattern ]] || continue
    n=$((n + 1))
    log="$logdir/$name.log"
    (cd "$dir" && "./$name" --jobs "$jobs" --color=never) >"$log" 2>&1
    status=$?
    synth=$(grep -a 'Synthesis:' "$log" | tail -n 1)
    printf '%-28s %s\n' "$name" "${synth:-[no Synthesis line] exit $status}"
    if [ $status -ne 0 ]; then
        rc=1
        echo "---- $name output (exit $status) ----"
        grep -av '^\[----\]\|^\[RUN \]\|^\[PASS\]' "$log" | tail -n 80
        echo "----"
        key=$(grep -aE -m 6 'ThreadSanitizer|AddressSanitizer|runtime error|SUMMARY|\[FAIL\]|Assertion|CRASH|Timeout|^ +#[0-2] ' "$log" |
            tr -s ' ' | cut -c1-160 | paste -sd '|' -)
        echo "$name exit $status: ${synth:-no Synthesis line} ${key:+-- $key}" >>"$logdir/FAILED"
    fi
done
if [ $n -eq 0 ]; then
    echo "no test binaries matching $pattern in $dir"
    exit 1
fi
exit $rc
