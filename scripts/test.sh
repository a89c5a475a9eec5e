#!/usr/bin/env bash
# The test command (./steward test [files...]): every suite in one run of node's test runner,
# so the output ends with its summary. When PostgreSQL is installed (as in CI) a local
# cluster is started on 127.0.0.1 and the database suites run on it as well as on SQLite;
# STEWARD_TEST_PG=0 skips that.
set -uo pipefail
cd "$(dirname "$0")/.."
started_pg=""
if [ "${STEWARD_TEST_PG:-1}" != "0" ] && [ -z "${STEWARD_TEST_PG_URL:-}" ] && ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  if [ -z "${STEWARD_PG_PORT:-}" ]; then
    # a port of its own, so a PostgreSQL already running on this machine never collides
    STEWARD_PG_PORT="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' 2>/dev/null || echo 55432)"
    export STEWARD_PG_PORT
  fi
  # a cluster another run started is used and left running (stopping it would break that run)
  if scripts/pg.sh status >/dev/null 2>&1; then
    STEWARD_TEST_PG_URL="$(scripts/pg.sh url)"
    export STEWARD_TEST_PG_URL
  elif scripts/pg.sh start; then
    started_pg=1
    STEWARD_TEST_PG_URL="$(scripts/pg.sh url)"
    export STEWARD_TEST_PG_URL
  else
    echo "test.sh: PostgreSQL did not start; running on SQLite only" >&2
  fi
fi
if [ "$#" -gt 0 ]; then files=("$@"); else mapfile -t files < <(find test -name '*.test.ts' | sort); fi
node --import tsx --test --test-concurrency=1 --test-timeout=300000 --test-reporter=spec "${files[@]}"
status=$?
if [ -n "$started_pg" ]; then scripts/pg.sh stop; fi
exit $status
