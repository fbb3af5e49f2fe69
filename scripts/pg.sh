#!/usr/bin/env bash
# A throwaway PostgreSQL server for tenure's PostgreSQL tests (the `postgres` feature:
# tests/election/fence_pg.rs), made with the server binaries of Debian's `postgresql`
# package (scripts/bootstrap.sh --with-postgres installs them).
#
#   scripts/pg.sh start        make the cluster if it is missing, start it if it is not
#                              running; print `export TENURE_PG_URL=...` and the TLS
#                              and TCP lines below (eval them)
#   scripts/pg.sh stop         stop it (the cluster stays, for the next start)
#   scripts/pg.sh url          print the connection string
#   scripts/pg.sh run CMD...   start, run CMD with TENURE_PG_URL set, stop if this
#                              command started it; CMD's exit code is the script's
#   scripts/pg.sh destroy      stop it and delete its folder
#
# For example, the PostgreSQL tests alone:
#
#   scripts/pg.sh run cargo test --test election fence_pg
#
# The server listens on a Unix socket in its folder (which workers in other network
# namespaces reach as well) and on 127.0.0.1, both on port $TENURE_PG_PORT (54329).
# Socket connections are trusted (no password): it is a test server, never a real one.
# Connections over 127.0.0.1 must give a password (scram-sha-256) and may use TLS, with
# a certificate for 127.0.0.1 and localhost signed by a CA of the cluster's own (made
# with openssl): TENURE_PG_TCP=127.0.0.1:PORT and TENURE_PG_TLS_ROOT=<the CA's file>
# say where, for the tests of passwords and TLS (they make a role with a password).
# Run as root, the cluster belongs to the user `postgres` (Debian's package makes it) or
# `nobody`: initdb refuses root.
#
# Environment:
#   TENURE_PG_DIR   the cluster's folder (default: ${TMPDIR:-/tmp}/tenure-pg-$UID)
#   TENURE_PG_PORT  the port (default 54329)
#   TENURE_PG_BIN   the folder holding initdb and pg_ctl (default: the newest
#                   /usr/lib/postgresql/*/bin, else initdb on PATH)
set -euo pipefail

dir="${TENURE_PG_DIR:-${TMPDIR:-/tmp}/tenure-pg-$(id -u)}"
port="${TENURE_PG_PORT:-54329}"
data="$dir/data"
sock="$dir/sock"
log="$dir/server.log"
user=tenure
db=tenure

die() { echo "tenure pg.sh: $*" >&2; exit 1; }

find_bin() {
    if [ -n "${TENURE_PG_BIN:-}" ]; then
        [ -x "$TENURE_PG_BIN/initdb" ] || die "TENURE_PG_BIN=$TENURE_PG_BIN holds no initdb"
        echo "$TENURE_PG_BIN"
        return
    fi
    local newest
    newest=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)
    if [ -n "$newest" ] && [ -x "$newest/initdb" ]; then
        echo "$newest"
    elif command -v initdb >/dev/null 2>&1; then
        dirname "$(command -v initdb)"
    else
        die "no PostgreSQL server binaries (initdb, pg_ctl): run scripts/bootstrap.sh --with-postgres, or set TENURE_PG_BIN"
    fi
}

# Runs a server binary as the cluster's owner.
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u "$owner" -- "$@"
    else
        "$@"
    fi
}

url() { echo "host=$sock port=$port user=$user dbname=$db"; }

# The CA and the server's certificate (once), and the client authentication rules
# (every start, so that an older cluster of this script's gets them too).
tls_and_hba() {
    local tls="$dir/tls"
    if [ ! -f "$tls/server.key" ]; then
        mkdir -p "$tls"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=tenure test CA" \
            -keyout "$tls/ca.key" -out "$tls/ca.crt" >/dev/null 2>&1 \
            || die "openssl could not make the test CA"
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout "$tls/server.key" -out "$tls/server.csr" >/dev/null 2>&1 \
            || die "openssl could not make the server's key"
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$tls/san.ext"
        openssl x509 -req -in "$tls/server.csr" -CA "$tls/ca.crt" -CAkey "$tls/ca.key" \
            -CAcreateserial -days 3650 -extfile "$tls/san.ext" -out "$tls/server.crt" \
            >/dev/null 2>&1 || die "openssl could not sign the server's certificate"
        chmod 600 "$tls/server.key"
        if [ "$(id -u)" = 0 ]; then chown "$owner" "$tls/server.key"; fi
    fi
    cat >"$dir/pg_hba.conf" <<'HBA'
local all all trust
host all all 127.0.0.1/32 scram-sha-256
HBA
    chmod 644 "$dir/pg_hba.conf" "$tls/server.crt" "$tls/ca.crt"
}

running() { [ -f "$data/postmaster.pid" ] && as_owner "$bin/pg_ctl" -D "$data" status >/dev/null 2>&1; }

start() {
    if [ ! -f "$data/PG_VERSION" ]; then
        mkdir -p "$dir"
        rm -rf "$data" "$sock"
        mkdir -p "$data" "$sock"
        if [ "$(id -u)" = 0 ]; then
            chown "$owner" "$data" "$sock"
            chmod 755 "$dir"
        fi
        as_owner "$bin/initdb" -D "$data" -U "$user" --auth=trust --encoding=UTF8 \
            --no-instructions >"$dir/initdb.log" 2>&1 \
            || { cat "$dir/initdb.log" >&2; die "initdb failed in $data"; }
    fi
    tls_and_hba
    if ! running; then
        if [ "$(id -u)" = 0 ]; then touch "$log" && chown "$owner" "$log"; fi
        as_owner "$bin/pg_ctl" -D "$data" -l "$log" -w -t 60 \
            -o "-p $port -k $sock -c listen_addresses=127.0.0.1 -c hba_file=$dir/pg_hba.conf \
                -c ssl=on -c ssl_cert_file=$dir/tls/server.crt -c ssl_key_file=$dir/tls/server.key" \
            start >/dev/null \
            || { tail -n 20 "$log" >&2; die "the server did not start (its log: $log)"; }
        # The database the tests use, once.
        if ! as_owner "$bin/psql" -h "$sock" -p "$port" -U "$user" -d postgres -tAc \
            "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1; then
            as_owner "$bin/psql" -h "$sock" -p "$port" -U "$user" -d postgres -qc \
                "CREATE DATABASE $db" >/dev/null
        fi
    fi
}

stop() {
    if running; then
        as_owner "$bin/pg_ctl" -D "$data" -w -m fast stop >/dev/null
    fi
}

bin=$(find_bin)
owner=$(id -un)
if [ "$(id -u)" = 0 ]; then
    if id postgres >/dev/null 2>&1; then owner=postgres; else owner=nobody; fi
    if [ -f "$data/PG_VERSION" ]; then owner=$(stat -c %U "$data"); fi
fi

case "${1:-}" in
    start)
        start
        echo "export TENURE_PG_URL='$(url)'"
        echo "export TENURE_PG_TCP='127.0.0.1:$port'"
        echo "export TENURE_PG_TLS_ROOT='$dir/tls/ca.crt'"
        ;;
    stop) stop ;;
    url) url ;;
    run)
        shift
        [ "$#" -gt 0 ] || die "run: give a command"
        was_running=0
        if running; then was_running=1; fi
        start
        status=0
        TENURE_PG_URL="$(url)" TENURE_PG_TCP="127.0.0.1:$port" \
            TENURE_PG_TLS_ROOT="$dir/tls/ca.crt" "$@" || status=$?
        if [ "$was_running" = 0 ]; then stop; fi
        exit "$status"
        ;;
    destroy)
        stop
        rm -rf "$dir"
        ;;
    *) die "usage: scripts/pg.sh start | stop | url | run CMD... | destroy" ;;
esac
