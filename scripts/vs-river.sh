#!/usr/bin/env bash
# River's own benchmark (`river bench`, which fences nothing) and pooltop's
# batched cycle (every commit fenced), side by side in one run on one
# throwaway PostgreSQL server with its durability settings as configured
# (fsync and synchronous_commit on, logged tables).
#
#   scripts/vs-river.sh                 # 30 s each, River draining 300,000 jobs
#   DUR=10s JOBS=100000 scripts/vs-river.sh
#   PARTITIONS=4 scripts/vs-river.sh    # pooltop's pool in 4 hash partitions
#
# It starts its own server from the system's PostgreSQL binaries in a
# temporary directory (as the user postgres when run as root) on a loopback
# port, and removes it on exit. It never reads PG* or DATABASE_URL. River's
# CLI is built from the Go module proxy (its version list is not served
# there, so one exact version is named: RIVER_VERSION).
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-30s}
JOBS=${JOBS:-300000}
WORKERS=${WORKERS:-4} # on 2 cores, 2 to 8 workers give the batched cycle its best rate (16 give some 15% less)
POOL=${POOL:-2000000} # ids in pooltop's pool: enough not to run empty in DUR
PARTITIONS=${PARTITIONS:-0} # >1: pooltop's pool hash-partitioned in that many partitions
PORT=${PORT:-55499}
RIVER_VERSION=${RIVER_VERSION:-v0.26.0}
. scripts/throwaway-server.sh

echo "server: $pgbin, port $PORT, fsync and synchronous_commit as configured (on)"
start_server "$PORT" -c max_connections=200 -c shared_buffers=512MB
base="postgres://postgres@127.0.0.1:$PORT"
"$pgbin/psql" -qAt "$base/postgres" -c "CREATE DATABASE river" -c "CREATE DATABASE pooltop" \
  -c "SELECT 'fsync=' || current_setting('fsync') || ' synchronous_commit=' || current_setting('synchronous_commit')"

river=$tmp/river
if [ ! -x "${RIVER_BIN:-}" ]; then
  mkdir "$tmp/rb"
  (cd "$tmp/rb" && go mod init rb >/dev/null 2>&1 &&
    GOPROXY=https://proxy.golang.org go get "github.com/riverqueue/river/cmd/river@$RIVER_VERSION" >/dev/null 2>&1 &&
    GOPROXY=https://proxy.golang.org go build -o "$river" github.com/riverqueue/river/cmd/river)
else
  river=$RIVER_BIN
fi
go build -o "$tmp/pooltop" .

"$river" migrate-up --database-url "$base/river" >/dev/null
echo
echo "== river bench --duration $DUR (continuous insert and work; River $RIVER_VERSION)"
"$river" bench --database-url "$base/river" --duration "$DUR" 2>&1 | tail -2
echo
echo "== river bench -n $JOBS (drain $JOBS jobs inserted beforehand)"
"$river" bench --database-url "$base/river" -n "$JOBS" 2>&1 | tail -2
echo
echo "== pooltop bench --strategies batched --workers $WORKERS --duration $DUR --partitions $PARTITIONS (every commit fenced)"
parts=()
if [ "$PARTITIONS" -gt 1 ]; then
  parts=(--partitions "$PARTITIONS")
fi
"$tmp/pooltop" bench --dsn "$base/pooltop" --allow-writes "${parts[@]}" --strategies batched --workers "$WORKERS" \
  --duration "$DUR" --pool-size "$POOL" --no-pgbench
