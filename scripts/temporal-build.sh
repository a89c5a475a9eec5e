#!/usr/bin/env bash
# Build the Temporal server and its SQL schema tool from the Go module (go.temporal.io/server) at
# one version, into $STEWARD_CACHE_DIR/temporal-server/<version>/: `temporal-server`,
# `temporal-sql-tool` and the `schema/` directory the tool applies. Rebuilt only when that
# directory lacks them (the version is in the path). Prints the directory.
#
#   scripts/temporal-build.sh 1.32.2
#
# The server needs a newer Go than many machines have: GOTOOLCHAIN names the toolchain the go
# command fetches from the module proxy (once per machine). The go command builds from a
# throwaway wrapper module, because `go install` refuses modules with replace directives.
set -euo pipefail
VERSION="${1:?usage: scripts/temporal-build.sh <server version, e.g. 1.32.2>}"
CACHE="${STEWARD_CACHE_DIR:-$HOME/.cache/steward}"
OUT="$CACHE/temporal-server/$VERSION"
export GOTOOLCHAIN="${STEWARD_GOTOOLCHAIN:-go1.27.3}"
export GOPATH="${GOPATH:-$CACHE/go}"
export GOMODCACHE="${GOMODCACHE:-$GOPATH/pkg/mod}"
export GOFLAGS="${GOFLAGS:--mod=mod}"

say() { echo "temporal-build: $*" >&2; }

if [ -x "$OUT/temporal-server" ] && [ -x "$OUT/temporal-sql-tool" ] && [ -d "$OUT/schema/postgresql" ]; then
  echo "$OUT"
  exit 0
fi
command -v go >/dev/null 2>&1 || { say "the go command is needed to build the Temporal server (Debian: apt-get install golang-go; any Go >= 1.21 fetches the toolchain it needs)"; exit 1; }

# one build at a time per machine: a second caller waits and then finds the binaries
mkdir -p "$CACHE/temporal-server"
exec 9>"$CACHE/temporal-server/.build.lock"
command -v flock >/dev/null 2>&1 && flock 9
if [ -x "$OUT/temporal-server" ] && [ -x "$OUT/temporal-sql-tool" ] && [ -d "$OUT/schema/postgresql" ]; then
  echo "$OUT"
  exit 0
fi

work="$(mktemp -d "$CACHE/temporal-server/build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
started=$(date +%s)
say "building the Temporal server $VERSION from go.temporal.io/server (toolchain $GOTOOLCHAIN; several minutes the first time)"
(
  cd "$work"
  go mod init steward-temporal-build >/dev/null 2>&1
  go get "go.temporal.io/server/cmd/server@v$VERSION" "go.temporal.io/server/cmd/tools/sql@v$VERSION" >&2
  go build -trimpath -o temporal-server go.temporal.io/server/cmd/server >&2
  go build -trimpath -o temporal-sql-tool go.temporal.io/server/cmd/tools/sql >&2
)
src="$(cd "$work" && go list -m -f '{{.Dir}}' go.temporal.io/server)"
mkdir -p "$OUT.tmp"
rm -rf "$OUT.tmp"/*
mv "$work/temporal-server" "$work/temporal-sql-tool" "$OUT.tmp/"
cp -r "$src/schema" "$OUT.tmp/schema"
chmod -R u+w "$OUT.tmp/schema"
rm -rf "$OUT"
mv "$OUT.tmp" "$OUT"
say "built in $(($(date +%s) - started)) s: $OUT"
echo "$OUT"
