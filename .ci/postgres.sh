#!/usr/bin/env bash
# Install (if needed) and start a local PostgreSQL server for the audit-store tests.
#
# Idempotent: rerunning it on a machine where the server already runs only checks that the
# role and database exist.  Prints one line on stdout,
#     export ENGINECFG_TEST_PG_URL=postgresql+psycopg://USER:PASS@127.0.0.1:PORT/DB
# so that callers can `eval "$(.ci/postgres.sh)"`; when ENGINECFG_PG_ENV_FILE is set the same
# line is also written to that file.  Everything else goes to stderr.
set -euo pipefail

PG_USER=${ENGINECFG_PG_USER:-enginecfg}
PG_PASS=${ENGINECFG_PG_PASS:-enginecfg}
PG_DB=${ENGINECFG_PG_DB:-enginecfg_test}
ENV_FILE=${ENGINECFG_PG_ENV_FILE:-}
export DEBIAN_FRONTEND=noninteractive

log() { echo "postgres.sh: $*" >&2; }
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi

if ! command -v pg_ctlcluster >/dev/null 2>&1 || ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
    log "installing postgresql with apt-get"
    $SUDO apt-get update -qq >&2
    $SUDO apt-get install -y -qq postgresql >&2
fi

VERSION=$(ls /usr/lib/postgresql | sort -V | tail -n1)
if ! pg_lsclusters -h 2>/dev/null | awk '{print $1" "$2}' | grep -qx "$VERSION main"; then
    log "creating cluster $VERSION/main"
    $SUDO pg_createcluster "$VERSION" main >&2
fi
PORT=$(pg_lsclusters -h | awk -v v="$VERSION" '$1==v && $2=="main" {print $3}')
STATUS=$(pg_lsclusters -h | awk -v v="$VERSION" '$1==v && $2=="main" {print $4}')
if [ "$STATUS" != "online" ]; then
    log "starting cluster $VERSION/main on port $PORT"
    $SUDO pg_ctlcluster "$VERSION" main start >&2
fi

# wait until it accepts connections
for _ in $(seq 1 60); do
    if $SUDO -u postgres psql -p "$PORT" -qAtc "select 1" >/dev/null 2>&1 \
       || su postgres -c "psql -p $PORT -qAtc 'select 1'" >/dev/null 2>&1; then
        break
    fi
    sleep 0.5
done

as_postgres() {
    if [ -n "$SUDO" ]; then sudo -u postgres "$@"; else su postgres -s /bin/sh -c "$(printf '%q ' "$@")"; fi
}

if [ "$(as_postgres psql -p "$PORT" -qAtc "select 1 from pg_roles where rolname='$PG_USER'")" != 1 ]; then
    log "creating role $PG_USER"
    as_postgres psql -p "$PORT" -qc "create role \"$PG_USER\" login password '$PG_PASS'" >&2
fi
if [ "$(as_postgres psql -p "$PORT" -qAtc "select 1 from pg_database where datname='$PG_DB'")" != 1 ]; then
    log "creating database $PG_DB"
    as_postgres psql -p "$PORT" -qc "create database \"$PG_DB\" owner \"$PG_USER\"" >&2
fi

LINE="export ENGINECFG_TEST_PG_URL=postgresql+psycopg://$PG_USER:$PG_PASS@127.0.0.1:$PORT/$PG_DB"
if [ -n "$ENV_FILE" ]; then echo "$LINE" > "$ENV_FILE"; fi
echo "$LINE"
