#!/usr/bin/env bash
# Creates .venv and installs Veil with what one of its two commands needs. Idempotent:
# each step checks first and only installs what is missing, so it is cheap to rerun.
#
#   bash scripts/bootstrap.sh demo         what `make demo` and the README's examples need
#   bash scripts/bootstrap.sh all          everything: the tests' servers and extras (make test)
#   bash scripts/bootstrap.sh check-rust   only find (or install) Rust 1.85+; tests/tooling runs it
#
# Prerequisites (README.md, "Before you start"): Python 3.11+ with venv, a C compiler and
# GMP's headers (system packages: installed here with apt-get only when absent, which needs
# root or sudo), Rust 1.85+ (installed here for the user through rustup when absent or
# older: no root), and for `make test` and `veil documents` Go 1.24+.
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-all}"
case "$mode" in demo | all | check-rust) ;; *)
    echo "usage: bash scripts/bootstrap.sh [demo|all|check-rust]" >&2
    exit 2
    ;;
esac

# Cargo.lock's dependencies need Rust 1.85 (edition 2024); Debian 12's own cargo is 1.63.
RUST_MIN=1.85
GO_MIN=1.24
PYTHON_MIN=3.11
# rustup's installer; a test points it at a local file so that no test reaches the network
RUSTUP_URL="${VEIL_RUSTUP_URL:-https://sh.rustup.rs}"
say() { echo "bootstrap: $*"; }
die() {
    echo "bootstrap: $*" >&2
    exit 1
}
# whether version $1 is at least $2 (dotted numbers)
at_least() { [ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -n1)" = "$2" ]; }
as_root_hint() { if [ "$(id -u)" = 0 ]; then echo "$*"; else echo "sudo $*"; fi; }

# rustup's own directory first, as its installer's env file would put it: a user's rustup
# toolchain wins over an older distribution cargo in /usr/bin.
[ -d "$HOME/.cargo/bin" ] && export PATH="$HOME/.cargo/bin:$PATH"

rust_version() { rustc --version 2>/dev/null | awk '{print $2}'; }

rust_ok() {
    command -v cargo >/dev/null && command -v rustc >/dev/null && at_least "$(rust_version)" "$RUST_MIN"
}

# The distribution's rustc, if apt offers one recent enough (Debian 13 does, Debian 12 does not).
apt_rust_hint() {
    command -v apt-cache >/dev/null || return 0
    local candidate
    candidate="$(apt-cache policy rustc 2>/dev/null | awk '/Candidate:/ {print $2}' | sed 's/+.*//; s/^[0-9]*://')"
    case "$candidate" in "" | "(none)") return 0 ;; esac
    if at_least "$candidate" "$RUST_MIN"; then
        echo "  - or your distribution's, which is recent enough (rustc $candidate): $(as_root_hint apt-get install cargo)"
    else
        echo "  (your distribution's cargo package is rustc $candidate, too old for Veil: do not use it)"
    fi
}

rust_unavailable() {
    {
        echo "bootstrap: Veil's Rust core needs Rust $RUST_MIN or later (cargo and rustc); $1."
        echo "  rustup's installer could not be fetched from $RUSTUP_URL (this machine cannot reach"
        echo "  it, or it failed), so nothing was installed. Install Rust $RUST_MIN+ for your user, then rerun:"
        echo "  - with rustup (https://rustup.rs; into ~/.rustup and ~/.cargo, no root) from a network that"
        echo "    reaches static.rust-lang.org: curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y"
        echo "  - or, where your organisation mirrors rustup, with RUSTUP_DIST_SERVER and RUSTUP_UPDATE_ROOT"
        echo "    set to the mirror before rerunning this command"
        apt_rust_hint
    } >&2
    exit 1
}

ensure_rust() {
    rust_ok && return 0
    local found
    if command -v rustc >/dev/null; then
        found="rustc $(rust_version) (at $(command -v rustc)) is older than $RUST_MIN"
    else
        found="no Rust toolchain (cargo, rustc) was found"
    fi
    if command -v rustup >/dev/null; then
        say "$found; installing the stable toolchain with your rustup (rustup toolchain install stable)"
        rustup toolchain install stable --profile minimal && rustup default stable ||
            rust_unavailable "$found, and \`rustup toolchain install stable\` failed"
    else
        say "$found. Installing Rust for you with rustup (https://rustup.rs): into ~/.rustup and"
        say "~/.cargo, no root, nothing outside your home directory; about 1-2 minutes."
        local installer
        installer="$(mktemp)"
        # shellcheck disable=SC2064
        trap "rm -f '$installer'" EXIT
        curl --proto '=https,file' --tlsv1.2 -sSf --max-time 60 -o "$installer" "$RUSTUP_URL" 2>/dev/null ||
            rust_unavailable "$found"
        sh "$installer" -y --no-modify-path --profile minimal --default-toolchain stable ||
            rust_unavailable "$found"
        export PATH="$HOME/.cargo/bin:$PATH"
        say "Rust $(rust_version) is in ~/.cargo/bin (make finds it there; for your own shell:"
        say "  . \"\$HOME/.cargo/env\")"
    fi
    rust_ok || rust_unavailable "$found, and after installing, rustc is $(rust_version || echo missing)"
}

if [ "$mode" = check-rust ]; then
    ensure_rust
    say "Rust $(rust_version) ok"
    exit 0
fi

# Python: the interpreter .venv is made from.
python3 -c "import sys; sys.exit(sys.version_info < tuple(map(int, '$PYTHON_MIN'.split('.'))))" 2>/dev/null ||
    die "Veil needs Python $PYTHON_MIN or later as python3 (found: $(python3 --version 2>&1 || echo none))."

# Go: FerretDB (veil documents, the documents tests) and Toxiproxy are built with it.
go_bin="$(command -v go || true)"
[ -z "$go_bin" ] && [ -x /usr/local/go/bin/go ] && go_bin=/usr/local/go/bin/go
go_version="$([ -n "$go_bin" ] && "$go_bin" env GOVERSION 2>/dev/null | sed 's/^go//')" || go_version=""
if [ -z "$go_version" ] || ! at_least "$go_version" "$GO_MIN"; then
    go_found="${go_version:+Go $go_version is older than $GO_MIN}"
    go_found="${go_found:-no Go was found}"
    go_hint="install Go $GO_MIN+ from https://go.dev/dl (unpack it into /usr/local/go, or, without root, into ~/go-sdk and put ~/go-sdk/go/bin on PATH; Debian 12's golang package is too old)"
    if [ "$mode" = all ]; then
        die "the tests build FerretDB and Toxiproxy with Go $GO_MIN or later; $go_found: $go_hint."
    fi
    say "note: $go_found; \`veil documents\` (FerretDB) will need Go $GO_MIN+: $go_hint."
fi

need_apt=()
command -v cc >/dev/null || need_apt+=(build-essential)
# GMP: the Paillier kernels link the system libgmp (rust/veil-kernels/Cargo.toml)
[ -f /usr/include/gmp.h ] || [ -f /usr/include/x86_64-linux-gnu/gmp.h ] || need_apt+=(libgmp-dev)
python3 -c 'import venv, ensurepip' 2>/dev/null || need_apt+=(python3-venv)
if [ "$mode" = all ]; then
    # libsodium: the PostgreSQL extension's JOIN-ADJ re-keying (make pgext; the tests build it)
    [ -f /usr/include/sodium.h ] || need_apt+=(libsodium-dev)
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
elif ! command -v psql >/dev/null; then
    say "note: psql is not installed; the README's \`veil serve\` example uses it ($(as_root_hint apt-get install postgresql-client))."
fi
if [ ${#need_apt[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        SUDO=()
    elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        SUDO=(sudo -n)
    else
        die "system packages are missing: ${need_apt[*]}. Installing them needs root: ask an administrator, or as root run: apt-get install -y ${need_apt[*]} (Debian/Ubuntu); then rerun."
    fi
    say "installing system packages with apt-get (as root): ${need_apt[*]}"
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq "${need_apt[@]}"
fi

ensure_rust

# make lint needs rustfmt and clippy; rustup installs them when missing.
if [ "$mode" = all ] && command -v rustup >/dev/null && ! cargo clippy --version >/dev/null 2>&1; then
    rustup component add clippy rustfmt
fi

# A long step: a line when it starts, one every 30 s while it runs (pip -q is silent for
# minutes while cargo builds the Rust core), and its time at the end.
stage() {
    local what="$1" start=$SECONDS
    shift
    say "$what"
    "$@" &
    local job=$! waited=0
    while kill -0 "$job" 2>/dev/null; do
        sleep 1
        waited=$((waited + 1))
        if [ $((waited % 30)) = 0 ] && kill -0 "$job" 2>/dev/null; then
            say "  ... still at it, $((SECONDS - start)) s"
        fi
    done
    wait "$job" || die "failed: $what"
    say "  done in $((SECONDS - start)) s"
}

if [ ! -x .venv/bin/python ]; then
    stage "creating .venv" python3 -m venv .venv
fi
stage "upgrading pip in .venv" .venv/bin/python -m pip install -q --upgrade pip
if [ "$mode" = all ]; then
    extras="dev,clients,spark,bench,keys"
else
    extras="clients,bench"
fi
stage "installing Veil [$extras] and its dependencies into .venv; cargo builds the Rust core (the first time about 5 minutes)" \
    .venv/bin/python -m pip install -q -e ".[$extras]"
.venv/bin/python -c 'import veil._native' && say "ok"

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
say "veil and veil-python are in $bin"
