#!/usr/bin/env bash
# A local PostgreSQL for tests and development, on 127.0.0.1 only, with its data under
# .data/pg. Uses Debian's postgresql binaries; initdb and pg_ctl run as the `postgres` user
# when started as root (initdb refuses root).
#   scripts/pg.sh start | stop | status | url
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${STEWARD_PG_PORT:-55432}"
DATA="${STEWARD_PG_DIR:-$PWD/.data/pg}"
PASS="steward-local-only"
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
[ -n "$BIN" ] && [ -x "$BIN/initdb" ] || { echo "pg.sh: PostgreSQL is not installed (Debian: apt-get install postgresql)" >&2; exit 1; }

as_pg() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

url() { echo "postgresql://steward:${PASS}@127.0.0.1:${PORT}/steward"; }

case "${1:-}" in
  start)
    if [ ! -f "$DATA/PG_VERSION" ]; then
      mkdir -p "$DATA"
      [ "$(id -u)" = "0" ] && chown postgres:postgres "$DATA" && chmod 700 "$DATA"
      # every parent must be traversable by postgres
      d="$(dirname "$DATA")"; while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done
      as_pg "$BIN/initdb" -D "$DATA" -U postgres --auth=trust -E UTF8 >/dev/null
    fi
    if ! as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; then
      as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
        -o "-c listen_addresses=127.0.0.1 -p $PORT -k /tmp -c max_connections=200 -c fsync=off" start >/dev/null
    fi
    as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc \
      "DO \$\$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='steward') THEN CREATE ROLE steward LOGIN SUPERUSER PASSWORD '${PASS}'; END IF; END \$\$;" >/dev/null
    if [ -z "$(as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname='steward'")" ]; then
      as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -qtAc "CREATE DATABASE steward OWNER steward" >/dev/null
    fi
    ;;
  stop)
    if [ -f "$DATA/PG_VERSION" ]; then as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null 2>&1 || true; fi
    ;;
  status)
    as_pg "$BIN/pg_ctl" -D "$DATA" status
    ;;
  url)
    url
    ;;
  *)
    echo "usage: scripts/pg.sh start|stop|status|url" >&2; exit 2
    ;;
esac
