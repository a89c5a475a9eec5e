#!/usr/bin/env bash
# A local PostgreSQL for tests and development: Debian's binaries (/usr/lib/postgresql/*/bin),
# data under .data/pg (STEWARD_PG_DIR), listening on 127.0.0.1 only at port
# ${STEWARD_PG_PORT:-55432}, with a `steward` role (password) and database.
#
#   scripts/pg.sh start    initialise if needed and start (fine when already running)
#   scripts/pg.sh stop     stop (fine when not running)
#   scripts/pg.sh status   pg_ctl status
#   scripts/pg.sh url      print the DATABASE_URL of the steward database
#
# initdb refuses to run as root, so when started as root, initdb and pg_ctl run as the
# `postgres` user (the data directory and its parents are made accessible to it). TCP
# connections need the password; the admin connection of this script uses the Unix socket in
# the data directory.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${STEWARD_PG_PORT:-55432}"
DATA="${STEWARD_PG_DIR:-$PWD/.data/pg}"
PASS="${STEWARD_PG_PASSWORD:-steward-local-only}"
BIN="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n1 || true)"
if [ -z "$BIN" ] || [ ! -x "$BIN/initdb" ]; then
  echo "pg.sh: PostgreSQL is not installed (Debian: apt-get install postgresql)" >&2
  exit 1
fi

as_pg() {
  if [ "$(id -u)" = "0" ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# the URL names the port the server actually listens on (another run may have started it)
url() {
  local port="$PORT"
  if running && [ -n "$(running_port)" ]; then port="$(running_port)"; fi
  echo "postgresql://steward:${PASS}@127.0.0.1:${port}/steward"
}

running() { as_pg "$BIN/pg_ctl" -D "$DATA" status >/dev/null 2>&1; }

# the port of the running server (line 4 of postmaster.pid)
running_port() { sed -n 4p "$DATA/postmaster.pid" 2>/dev/null || true; }

psql_admin() {
  as_pg "$BIN/psql" -h "$DATA" -p "$PORT" -U postgres -d postgres -v ON_ERROR_STOP=1 -qtA "$@"
}

init() {
  mkdir -p "$DATA"
  if [ "$(id -u)" = "0" ]; then
    chown postgres:postgres "$DATA"
    # every parent directory must be traversable by postgres
    d="$(dirname "$DATA")"
    while [ "$d" != "/" ]; do chmod o+x "$d" 2>/dev/null || true; d="$(dirname "$d")"; done
  fi
  chmod 700 "$DATA"
  pwfile="$(mktemp)"
  trap 'rm -f "$pwfile"' RETURN
  # the superuser gets a random password: it is only used over the Unix socket (trust)
  head -c 24 /dev/urandom | base64 >"$pwfile"
  [ "$(id -u)" = "0" ] && chown postgres "$pwfile"
  as_pg "$BIN/initdb" -D "$DATA" -U postgres --pwfile="$pwfile" -E UTF8 --locale=C.UTF-8 \
    --auth-local=trust --auth-host=scram-sha-256 >/dev/null
}

start() {
  [ -f "$DATA/PG_VERSION" ] || init
  if running; then
    # already running (perhaps for another test run, on another port): keep it
    PORT="$(running_port)"
  else
    as_pg "$BIN/pg_ctl" -D "$DATA" -l "$DATA/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DATA -c max_connections=200 -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null
  fi
  psql_admin -c "DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'steward') THEN
      CREATE ROLE steward LOGIN SUPERUSER PASSWORD '${PASS}';
    ELSE
      ALTER ROLE steward LOGIN SUPERUSER PASSWORD '${PASS}';
    END IF;
  END \$\$;" >/dev/null
  if [ -z "$(psql_admin -c "SELECT 1 FROM pg_database WHERE datname = 'steward'")" ]; then
    psql_admin -c "CREATE DATABASE steward OWNER steward" >/dev/null
  fi
}

stop() {
  if [ -f "$DATA/PG_VERSION" ] && running; then as_pg "$BIN/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null; fi
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) as_pg "$BIN/pg_ctl" -D "$DATA" status ;;
  url) url ;;
  *)
    echo "usage: scripts/pg.sh start|stop|status|url" >&2
    exit 2
    ;;
esac
