#!/usr/bin/env bash
# Mutation check: every test that names a mechanism must fail when that
# mechanism is removed. tools/mutants.d/*.txt lists one-line mutations:
#
#   [mutant <id>]
#   file: <path from the repo root>
#   find: <exact text, occurring exactly once in the file>
#   replace: <text put in its place; may be empty>
#   test: <test binary>
#   filter: <Criterion --filter glob>
#   why: <the mechanism the test guards>
#
# Each mutant is applied in a scratch copy of the working tree (tracked and
# untracked-but-not-ignored files), the test binary (and the kvtier command,
# which some tests run) is rebuilt, the filtered tests run, and the file is
# restored. A mutant is KILLED when the tests fail, SURVIVED when they pass,
# STALE when its `find` text is not in the file exactly once, NOBUILD when the
# mutated tree does not compile (a mutation must compile to prove anything).
# Not part of `make check` (it rebuilds once per mutant); run it before
# resolving an issue. tools/mutants-compile.py checks in minutes that every
# mutant still builds (a NOBUILD one proves nothing) without running tests.
#
# Usage: tools/mutants.sh [-k ID-GLOB] [-l] [LIST-FILE...]
#   -k GLOB  only the mutants whose id matches GLOB (shell pattern)
#   -l       list the mutants and exit
# Exit: 0 when every selected mutant is killed, 1 otherwise.
set -uo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
only='*'
list_only=0
while getopts "k:l" opt; do
    case $opt in
    k) only=$OPTARG ;;
    l) list_only=1 ;;
    *) sed -n '2,27p' "$0"; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
lists=("$@")
[ ${#lists[@]} -eq 0 ] && lists=(tools/mutants.d/*.txt)

ids=() files=() finds=() repls=() tests=() filters=() whys=() origins=()
parse() { # list-file
    local f=$1 line id="" file="" find="" repl="" test="" filter="" why="" have_repl=0 n=0
    flush() {
        [ -z "$id" ] && return 0
        if [ -z "$file" ] || [ -z "$find" ] || [ -z "$test" ] || [ $have_repl -eq 0 ]; then
            echo "$f: mutant $id lacks file, find, replace or test" >&2
            exit 2
        fi
        ids+=("$id") files+=("$file") finds+=("$find") repls+=("$repl")
        tests+=("$test") filters+=("${filter:-*}") whys+=("$why") origins+=("$f")
        id="" file="" find="" repl="" test="" filter="" why="" have_repl=0
    }
    while IFS= read -r line || [ -n "$line" ]; do
        n=$((n + 1))
        case $line in
        '[mutant '*']') flush; id=${line#\[mutant }; id=${id%\]} ;;
        'file: '*) file=${line#file: } ;;
        'find: '*) find=${line#find: } ;;
        'replace:'*) repl=${line#replace:}; repl=${repl# }; have_repl=1 ;;
        'test: '*) test=${line#test: } ;;
        'filter: '*) filter=${line#filter: } ;;
        'why: '*) why=${line#why: } ;;
        '' | '#'*) ;;
        *) echo "$f:$n: not a mutant line: $line" >&2; exit 2 ;;
        esac
    done <"$f"
    flush
}
for f in "${lists[@]}"; do
    [ -f "$f" ] || continue
    parse "$f"
done
sel=()
for i in "${!ids[@]}"; do
    # shellcheck disable=SC2053
    [[ ${ids[$i]} == $only ]] && sel+=("$i")
done
if [ ${#sel[@]} -eq 0 ]; then
    echo "no mutants selected"
    exit 2
fi
if [ $list_only -eq 1 ]; then
    for i in "${sel[@]}"; do printf '%-44s %-22s %s\n' "${ids[$i]}" "${tests[$i]}" "${whys[$i]}"; done
    exit 0
fi

scratch=$(mktemp -d "${TMPDIR:-/tmp}/kvt-mutants.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
tree="$scratch/main"
mkdir -p "$tree"
git ls-files -co --exclude-standard -z | (cd "$root" && xargs -0 cp --parents -t "$tree" 2>/dev/null)
# tests that read ../shared (the conversation trace) find it beside the copy
[ -d "$root/../shared" ] && ln -s "$root/../shared" "$scratch/shared"
build="$tree/build"
echo "== mutants: ${#sel[@]} selected, scratch copy $tree"
cmake -S "$tree" -B "$build" -DKVTIER_WERROR=ON >/dev/null || { echo "configure failed"; exit 1; }
JOBS=${JOBS:-$(nproc 2>/dev/null || echo 2)}

killed=0 survived=0 other=0
results=()
for i in "${sel[@]}"; do
    id=${ids[$i]} file=${files[$i]} find=${finds[$i]} repl=${repls[$i]} test=${tests[$i]}
    target="$tree/$file"
    status=""
    if [ ! -f "$target" ]; then
        status=STALE
    else
        orig=$(cat "$target"; printf x)
        orig=${orig%x}
        rest=${orig#*"$find"}
        if [ "$rest" = "$orig" ] || [ "${rest#*"$find"}" != "$rest" ]; then
            status=STALE
        fi
    fi
    if [ -z "$status" ]; then
        mutated=${orig/"$find"/"$repl"}
        printf '%s' "$mutated" >"$target"
        if ! cmake --build "$build" --target "$test" kvtier -j"$JOBS" >"$scratch/build.log" 2>&1; then
            status=NOBUILD
        elif (cd "$build" && timeout 600 "./$test" --filter "${filters[$i]}" --jobs 2 --color=never \
            >"$scratch/test.log" 2>&1); then
            if grep -aq 'Tested: 0 ' "$scratch/test.log"; then
                status=NOTEST
            else
                status=SURVIVED
            fi
        else
            status=KILLED
        fi
        printf '%s' "$orig" >"$target"
    fi
    case $status in
    KILLED) killed=$((killed + 1)) ;;
    SURVIVED) survived=$((survived + 1)) ;;
    *) other=$((other + 1)) ;;
    esac
    line=$(printf '%-9s %-44s %-22s %s' "$status" "$id" "$test" "${whys[$i]}")
    results+=("$line")
    echo "$line"
done
echo
echo "== mutants: $killed killed, $survived survived, $other stale/unbuildable/no test (of ${#sel[@]})"
[ $survived -eq 0 ] && [ $other -eq 0 ]
