#!/usr/bin/env bash
# The test command (./steward test [files...]; .ci/run is this with CI=true): every suite in one
# run of node's test runner, so the output ends with its summary.
#
# 1. System packages the suites need beyond Node (Debian names): installed with apt-get when
#    that is possible without asking (root, or sudo without a password; STEWARD_TEST_INSTALL=0
#    never installs). What is still missing is named before the run starts, with what it costs:
#    outside CI the suites that need it are skipped with that reason (test/helpers/requirements.ts);
#    with CI=true the run stops here and fails instead.
# 2. When PostgreSQL is installed, a local cluster is started on 127.0.0.1 and the database
#    suites run on it as well as on SQLite; STEWARD_TEST_PG=0 skips that.
set -uo pipefail
cd "$(dirname "$0")/.."

# package | the suites that need it
packages=(
  "postgresql|the database suites on PostgreSQL (without it they run on SQLite only)"
  "bubblewrap|the sandbox, coding agent, repository change, run_command action and chaos suites"
  "git|the git, coding agent, repository change and chaos suites"
  "docker-compose|the docker-compose.yml validation"
  "chromium|the Temporal UI browser test"
  "openssl|the process roles test (its mutual-TLS certificates)"
  "dovecot-imapd|the workspace IMAP inbox suite (a real IMAP server)"
)
# an executable program on PATH (bash's `command -v` also names files that are not executable)
have() { local p; p="$(command -v "$1" 2>/dev/null)" && [ -x "$p" ]; }
installed() {
  case "$1" in
    postgresql) ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 ;;
    bubblewrap) have bwrap ;;
    dovecot-imapd) [ -x /usr/sbin/dovecot ] && ls /usr/lib/dovecot/imap >/dev/null 2>&1 ;;
    # STEWARD_TEST_BROWSER=0 switches the browser test off: no Chromium needed then
    chromium) [ "${STEWARD_TEST_BROWSER:-}" = "0" ] || { [ -n "${STEWARD_CHROMIUM:-}" ] && [ -x "${STEWARD_CHROMIUM}" ]; } || have chromium || have chromium-browser ;;
    *) have "$1" ;;
  esac
}
missing_packages() {
  local entry
  for entry in "${packages[@]}"; do installed "${entry%%|*}" || echo "${entry%%|*}"; done
}

mapfile -t missing < <(missing_packages)
if [ "${#missing[@]}" -gt 0 ] && [ "${STEWARD_TEST_INSTALL:-1}" != "0" ] && command -v apt-get >/dev/null 2>&1; then
  as_root=()
  if [ "$(id -u)" != "0" ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true >/dev/null 2>&1; then as_root=(sudo); else as_root=(none); fi
  fi
  if [ "${as_root[0]:-}" != "none" ]; then
    echo "test.sh: installing the system packages the suites need: ${missing[*]}" >&2
    # Debian starts a cluster of its own on install; Steward's tests use their own on another port.
    "${as_root[@]}" apt-get update -qq >&2 &&
      "${as_root[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
      echo "test.sh: apt-get could not install them" >&2
    mapfile -t missing < <(missing_packages)
  fi
fi
if [ "${#missing[@]}" -gt 0 ]; then
  {
    echo "test.sh: missing system packages: ${missing[*]}"
    for entry in "${packages[@]}"; do
      for m in "${missing[@]}"; do [ "$m" = "${entry%%|*}" ] && echo "  ${m}: needed by ${entry#*|}"; done
    done
    echo "  install them with: sudo apt-get install ${missing[*]}"
    echo "  (./steward test installs them itself when run as root or with sudo that needs no password)"
  } >&2
  if [ "${CI:-}" = "true" ]; then
    echo "test.sh: CI=true: a missing part fails the run instead of skipping suites" >&2
    exit 1
  fi
  echo "test.sh: those suites are skipped, each saying why" >&2
fi

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
# 3. The Temporal server for the cluster suites (test/e2e/cluster*.test.ts), built from its Go module
#    at docker-compose.yml's version (scripts/temporal-build.sh): cached under the cache
#    directory, so only the first run on a machine pays for it (several minutes).
wants_cluster() { [ "$#" -eq 0 ] || printf '%s\n' "$@" | grep -q 'cluster[-a-z]*\.test\.ts'; }
if [ -n "${STEWARD_TEST_PG_URL:-}" ] && [ "${STEWARD_TEST_CLUSTER:-1}" != "0" ] && wants_cluster "$@"; then
  version="$(sed -n 's#^ *image: temporalio/server:\([0-9.]*\)$#\1#p' docker-compose.yml | head -n1)"
  if command -v go >/dev/null 2>&1; then
    built_at=$(date +%s)
    if scripts/temporal-build.sh "$version" >/dev/null; then
      echo "test.sh: the Temporal server $version is ready for the cluster suite ($(($(date +%s) - built_at)) s)" >&2
    else
      echo "test.sh: the Temporal server $version did not build; the cluster suite says what is missing" >&2
    fi
  else
    echo "test.sh: no Go toolchain, so no Temporal server for the cluster suite (it says so)" >&2
  fi
fi

if [ "$#" -gt 0 ]; then files=("$@"); else mapfile -t files < <(find test -name '*.test.ts' | sort); fi
# two files at a time (STEWARD_TEST_CONCURRENCY): the suites mostly wait on their servers, so on
# 2 cores the whole run takes about two thirds of the time it takes one file after another.
# --test-timeout bounds each test and each file as a whole: the cluster suite's file runs
# several minutes of its own (a loaded machine took it past 5 minutes), so 15 minutes.
# the Node options of every Steward process (scripts/bootstrap.sh, platform/node-options.ts), for every process of the run
for flag in ${STEWARD_NODE_FLAGS:-}; do
  case " ${NODE_OPTIONS:-} " in *" $flag "*) ;; *) export NODE_OPTIONS="${NODE_OPTIONS:+$NODE_OPTIONS }$flag" ;; esac
done
node --import tsx --test --test-concurrency="${STEWARD_TEST_CONCURRENCY:-2}" --test-timeout=900000 --test-reporter=spec "${files[@]}"
status=$?
if [ -n "$started_pg" ]; then scripts/pg.sh stop; fi
exit $status
