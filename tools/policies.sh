#!/usr/bin/env bash
# State policies side by side (issue 15 §4): replays TRACE once per
# --state-policy (kvtier, interval, every-chunk, marconi) with a hybrid
# model, and once with the dense model at the hybrid model's real pool
# sizes (also when they are not given) as the reference,
# then prints one table: hit share by tier (of all input tokens), total,
# the hybrid total over the dense one, state tax per resume, recomputed
# share, real bytes moved (loads + saves, the stored bytes times the byte
# scale) and wrong resumes. Exit 1 if any run failed or resumed a wrong
# byte.
#
# Usage: tools/policies.sh TRACE|synthetic [kvtier replay options...]
#   TRACE       a Mooncake jsonl trace; `synthetic` for the built-in workload
#   options     passed to every run (--limit, --hbm-pool, --cpu-pool, ...);
#               --model picks the hybrid model (default qwen3-next-like)
# Environment: KVTIER (the kvtier binary, default build/kvtier),
#   JOBS (runs at once, default the CPU count), KEEP (a directory that
#   keeps every run's report.json and stderr; default a temporary one).
set -uo pipefail
[ $# -ge 1 ] || { sed -n '2,18p' "$0"; exit 2; }
root=$(cd "$(dirname "$0")/.." && pwd)
kvtier=${KVTIER:-$root/build/kvtier}
[ -x "$kvtier" ] || { echo "policies.sh: no kvtier binary at $kvtier (make first)" >&2; exit 2; }
trace=$1
shift
src=()
if [ "$trace" != synthetic ]; then
    [ -r "$trace" ] || { echo "policies.sh: cannot read trace $trace" >&2; exit 2; }
    src=(--trace "$trace")
fi
model=qwen3-next-like
args=()
while [ $# -gt 0 ]; do
    case $1 in
    --model) model=${2:?--model needs a value}; shift 2 ;;
    --model=*) model=${1#--model=}; shift ;;
    --state-policy*) echo "policies.sh: --state-policy is what this script varies" >&2; exit 2 ;;
    *) args+=("$1"); shift ;;
    esac
done
[ "$model" != dense ] || { echo "policies.sh: --model must be a hybrid model" >&2; exit 2; }
dir=${KEEP:-$(mktemp -d /tmp/kvt-policies-XXXXXX)}
mkdir -p "$dir"
jobs=${JOBS:-$(nproc 2>/dev/null || echo 2)}
runs=(kvtier interval every-chunk marconi dense)
run() { # name [options...]
    local n=$1 m=$model p=()
    shift
    if [ "$n" = dense ]; then m=dense; else p=(--state-policy "$n"); fi
    "$kvtier" replay "${src[@]}" --model "$m" "${p[@]}" "$@" "${args[@]}" --quiet \
        --json "$dir/$n.json" >/dev/null 2>"$dir/$n.stderr"
    echo $? >"$dir/$n.rc"
}
#  The dense reference runs at the hybrid model's real pool sizes (its own
#  defaults are another GPU's): learnt from a one-request run.
"$kvtier" replay "${src[@]}" --model "$model" --limit 1 "${args[@]}" --quiet \
    --json "$dir/sizes.json" >/dev/null 2>"$dir/sizes.stderr" ||
    { echo "policies.sh: kvtier replay refused the options: $(tail -1 "$dir/sizes.stderr")" >&2; exit 2; }
read -r -a sizes < <(/usr/bin/python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))
print(r["hbm_pool_bytes"], r["cpu_pool_bytes"])' "$dir/sizes.json")
running=0
for n in "${runs[@]}"; do
    if [ "$n" = dense ]; then
        run dense --hbm-pool "${sizes[0]}" --cpu-pool "${sizes[1]}" &
    else
        run "$n" &
    fi
    running=$((running + 1))
    if [ $running -ge "$jobs" ]; then
        wait -n
        running=$((running - 1))
    fi
done
wait
/usr/bin/python3 - "$dir" "$model" "${runs[@]}" <<'EOF'
import json, sys
d, model, runs = sys.argv[1], sys.argv[2], sys.argv[3:]
rows, bad, dense_total = [], 0, None
for n in runs:
    rc = open(f"{d}/{n}.rc").read().strip()
    try:
        r = json.load(open(f"{d}/{n}.json"))
    except (OSError, ValueError):
        print(f"{n}: no report (exit {rc}); see {d}/{n}.stderr", file=sys.stderr)
        bad = 1
        continue
    if rc != "0":
        bad = 1
    inp = r["input_tokens"] or 1
    hit = r["ledger"]["hit"]
    moved = 0
    for c in r["counters"].values():
        moved += c.get("worker.transfer_bytes.load.sum", 0) + c.get("worker.transfer_bytes.save.sum", 0)
    moved *= r["engine"].get("byte_scale", 1)
    total = sum(hit.values()) / inp
    if n == "dense":
        dense_total = total
    tax = r.get("state_tax", {}).get("tokens_per_resume")
    rows.append((n, hit, inp, total, tax, r["recomputed_share"], moved, r["wrong_resumes"], rc,
                 r["ledger"]["ideal"] / inp))
    if r["wrong_resumes"]:
        bad = 1
print(f"state policies, {model} (dense: the same sizes), every share of all input tokens")
print("| policy | HBM | CPU | disk | total | / dense | / ideal | tax/resume | recomputed | moved GiB | wrong | exit |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for n, hit, inp, total, tax, rec, moved, wrong, rc, ideal in rows:
    ratio = f"{total / dense_total:.3f}" if dense_total else "-"
    print(f"| {n} | {100 * hit['hbm'] / inp:.2f}% | {100 * hit['cpu'] / inp:.2f}% | "
          f"{100 * (hit['disk'] + hit['remote']) / inp:.2f}% | {100 * total:.2f}% | {ratio} | "
          f"{total / ideal if ideal else 0:.3f} | {'-' if tax is None else f'{tax:.1f}'} | "
          f"{100 * rec:.2f}% | {moved / 2**30:.1f} | {wrong} | {rc} |")
sys.exit(bad)
EOF
