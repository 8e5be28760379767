#!/usr/bin/env bash
# Installs the Debian packages kvtier builds and tests with, when missing.
# Idempotent and fast when everything is present: it asks dpkg first and only
# runs apt-get (update once, then install) for what is not installed.
set -euo pipefail

pkgs=(
    build-essential cmake pkg-config
    libczmq-dev libzmq3-dev libmsgpack-dev libcriterion-dev libxxhash-dev libjansson-dev libyaml-dev
    libhiredis-dev redis-server redis-tools
    libmicrohttpd-dev python3-prometheus-client python3-cffi python3-dev
    libamdhip64-dev
    clang clang-format libclang-rt-14-dev libfuzzer-14-dev
    gnuplot-nox
)

missing=()
for p in "${pkgs[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done

if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi

echo "setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo="sudo"
    else
        echo "setup: missing packages (${missing[*]}) and not root; install them and rerun" >&2
        exit 1
    fi
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "setup: done"
