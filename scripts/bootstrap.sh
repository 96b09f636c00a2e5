#!/usr/bin/env bash
# Creates .venv and installs Veil with everything it needs. Idempotent: each
# step checks first and only installs what is missing, so it is cheap to rerun.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
[ -f /usr/include/gmp.h ] || [ -f /usr/include/x86_64-linux-gnu/gmp.h ] || need_apt+=(libgmp-dev)
# libsodium: the PostgreSQL extension's JOIN-ADJ re-keying (make pgext; the tests build it)
[ -f /usr/include/sodium.h ] || need_apt+=(libsodium-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
# psql: the tests of `veil serve` drive it as a user would
command -v psql >/dev/null || need_apt+=(postgresql-client)
# Java: the Spark backend's JVM (PySpark 4 needs Java 17 or later); javac builds Veil's
# JVM server functions for Spark (veil.backends.spark_jvm; without it, Python UDFs)
command -v javac >/dev/null || need_apt+=(openjdk-17-jdk-headless)
# Maven: fetches from Maven Central the jars of the JVM servers the tests start
# (veil_dev.servers.cassandra; veil_dev.servers.mongojava, whose launcher javac compiles)
command -v mvn >/dev/null || need_apt+=(maven)
# SoftHSM2: the HSM behind the tests of the pkcs11: key provider (tests/keys)
command -v softhsm2-util >/dev/null || need_apt+=(softhsm2)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "bootstrap: installing system packages: ${need_apt[*]}"
    if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

if ! command -v cargo >/dev/null; then
    if [ -x "$HOME/.cargo/bin/cargo" ]; then
        export PATH="$HOME/.cargo/bin:$PATH"
    else
        echo "bootstrap: Rust (cargo) is needed to build veil._native; install it from rustup or apt (cargo)." >&2
        exit 1
    fi
fi

# make lint needs rustfmt and clippy; rustup installs them when missing.
if command -v rustup >/dev/null && ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add clippy rustfmt
fi

if [ ! -x .venv/bin/python ]; then
    echo "bootstrap: creating .venv"
    python3 -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip
echo "bootstrap: installing Veil and its dependencies into .venv (builds the Rust core)"
.venv/bin/python -m pip install -q -e '.[dev,spark,bench,keys]'
.venv/bin/python -c 'import veil._native' && echo "bootstrap: ok"

# `veil` and `veil-python` (this environment's interpreter) on the user's PATH,
# so the README's examples run from any directory: small scripts in ~/.local/bin
# (on PATH in new login shells on Debian/Ubuntu; the README says how otherwise).
bin="$HOME/.local/bin"
mkdir -p "$bin"
for name in veil veil-python; do
    target="$PWD/.venv/bin/${name#veil-}"
    [ "$name" = veil ] && target="$PWD/.venv/bin/veil"
    printf '#!/bin/sh\n# installed by %s/scripts/bootstrap.sh\nexec "%s" "$@"\n' "$PWD" "$target" > "$bin/$name"
    chmod 755 "$bin/$name"
done
echo "bootstrap: veil and veil-python are in $bin"
