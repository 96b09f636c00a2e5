#!/usr/bin/env bash
# Builds Veil's PostgreSQL 15 extension (python/veil/backends/pgext) and
# installs it into the PostgreSQL installation. Installs PostgreSQL 15, its
# server headers, GMP, OpenSSL and libsodium headers with apt-get first, only if absent.
# Idempotent and cheap to rerun (make rebuilds only what changed).
set -euo pipefail
cd "$(dirname "$0")/../.."

PG_BIN=${VEIL_PG_BIN:-/usr/lib/postgresql/15/bin}
if [ "$(id -u)" = 0 ]; then SUDO=""; else SUDO="sudo"; fi

need_apt=()
[ -x "$PG_BIN/postgres" ] || need_apt+=(postgresql-15)
[ -x "$PG_BIN/pg_config" ] && [ -d /usr/include/postgresql/15/server ] || need_apt+=(postgresql-server-dev-15)
[ -f /usr/include/gmp.h ] || [ -f /usr/include/x86_64-linux-gnu/gmp.h ] || need_apt+=(libgmp-dev)
[ -f /usr/include/openssl/evp.h ] || need_apt+=(libssl-dev)
[ -f /usr/include/sodium.h ] || need_apt+=(libsodium-dev)
command -v cc >/dev/null || need_apt+=(build-essential)
if [ ${#need_apt[@]} -gt 0 ]; then
    echo "install_extension: installing system packages: ${need_apt[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

make -s -C python/veil/backends/pgext PG_CONFIG="$PG_BIN/pg_config"
$SUDO make -s -C python/veil/backends/pgext PG_CONFIG="$PG_BIN/pg_config" install
