#!/usr/bin/env bash
# The price of the schema contract, measured: the claim → fenced commit
# cycle on pooltop's layout (two non-HOT updates of the pool row per cycle)
# beside two layouts that avoid them, each run by pgbench on one throwaway
# server, each with fenced commits, and each checked afterwards:
#
#   contract   resource_pool as pooltop has it: the claim and the commit
#              each update the row (status sits under partial indexes)
#   side       lease state out of the pool row: free(id, next_token) is a
#              queue the claim deletes from, lease(id, token, until) holds
#              live leases, the commit deletes the lease and writes the
#              ledger; a reap moves an expired lease back to free with its
#              token raised. No row is ever updated.
#   delete     pooltop's claim, but the commit deletes the pool row: the
#              ledger is the record of what was consumed.
#
#   scripts/contract-price.sh                 # 10 s per run, 1 and 8 clients
#   DUR=30 CLIENTS="1 4 16" ROWS=2000000 scripts/contract-price.sh
#   SETTINGS="-c fsync=off -c synchronous_commit=off" scripts/contract-price.sh   # CPU-bound, as the embedded server
#
# Each layout must keep the guarantee: one fenced effect per id, a stale
# token rejected after its lease was reaped and the id claimed again. The
# product's schema does not change; this is an experiment for a decision.
set -euo pipefail
cd "$(dirname "$0")/.."

DUR=${DUR:-10}
CLIENTS=${CLIENTS:-"1 8"}
ROWS=${ROWS:-1000000}
PORT=${PORT:-55498}
SETTINGS=${SETTINGS:-} # extra server settings (-c name=value …); durability as configured (on) by default
. scripts/throwaway-server.sh
# shellcheck disable=SC2086 # SETTINGS is a list of -c name=value
start_server "$PORT" -c max_connections=100 -c shared_buffers=512MB -c autovacuum_naptime=10s $SETTINGS
db="postgres://postgres@127.0.0.1:$PORT/postgres"
psql() { "$pgbin/psql" -qAtX -v ON_ERROR_STOP=1 "$db" "$@"; }
echo "server: $pgbin, port $PORT, $ROWS ids per layout, fsync $(psql -c 'SHOW fsync'), synchronous_commit $(psql -c 'SHOW synchronous_commit')"

go build -o "$tmp/pooltop" .
"$tmp/pooltop" migrate --dsn "$db" --schema contract >/dev/null
"$tmp/pooltop" seed --dsn "$db" --schema contract --count "$ROWS" >/dev/null
"$tmp/pooltop" migrate --dsn "$db" --schema del >/dev/null
"$tmp/pooltop" seed --dsn "$db" --schema del --count "$ROWS" >/dev/null
# In the delete layout the ledger outlives the row: no foreign key to it.
psql -c "ALTER TABLE del.business_ledger DROP CONSTRAINT business_ledger_resource_id_fkey"
psql <<SQL
CREATE SCHEMA side;
SET search_path = side;
CREATE TABLE pool (id bigint PRIMARY KEY, identifier text NOT NULL UNIQUE);
CREATE TABLE free (id bigint PRIMARY KEY REFERENCES pool, next_token bigint NOT NULL);
CREATE TABLE lease (id bigint PRIMARY KEY REFERENCES pool, holder text NOT NULL, token bigint NOT NULL,
                    leased_until timestamptz NOT NULL);
CREATE INDEX lease_until ON lease (leased_until);
CREATE TABLE business_ledger (id bigserial PRIMARY KEY, resource_id bigint NOT NULL UNIQUE REFERENCES pool,
  lease_token bigint NOT NULL, request_id text NOT NULL UNIQUE, holder text NOT NULL, payload text NOT NULL DEFAULT '',
  fenced boolean NOT NULL, created_at timestamptz NOT NULL DEFAULT clock_timestamp());
INSERT INTO pool SELECT g, 'res-' || lpad(g::text, 10, '0') FROM generate_series(1, $ROWS) g;
INSERT INTO free SELECT id, 1 FROM pool;
VACUUM ANALYZE pool, free, lease, business_ledger;
SQL

# The cycle of each layout, as pgbench runs it (holder 'pgbench', lease 60 s).
# contract: the engine's ClaimSQL(1) and CommitSQL.
cat >"$tmp/contract.sql" <<'SQL'
WITH locked AS MATERIALIZED ( SELECT id FROM resource_pool WHERE status = 'UNUSED' AND lease_token < 9223372036854775807 ORDER BY id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED ) UPDATE resource_pool AS r SET status = 'PENDING', holder = 'pgbench', lease_token = r.lease_token + 1, leased_until = clock_timestamp() + 60000000::bigint * interval '1 microsecond', updated_at = clock_timestamp() FROM locked WHERE r.id = locked.id AND r.status = 'UNUSED' RETURNING r.id, r.identifier, r.lease_token, r.leased_until
\gset
WITH fenced AS ( UPDATE resource_pool SET status = 'CONSUMED', leased_until = NULL, updated_at = clock_timestamp() WHERE id = :id AND lease_token = :lease_token AND status = 'PENDING' AND (leased_until IS NULL OR leased_until > clock_timestamp()) RETURNING id, lease_token ) INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced) SELECT id, lease_token, 'pgbench-' || :id, 'pgbench', '', true FROM fenced RETURNING id, resource_id, lease_token, created_at, 0;
SQL
# delete: the same claim; the commit deletes the row it fences on.
cat >"$tmp/del.sql" <<'SQL'
WITH locked AS MATERIALIZED ( SELECT id FROM resource_pool WHERE status = 'UNUSED' AND lease_token < 9223372036854775807 ORDER BY id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED ) UPDATE resource_pool AS r SET status = 'PENDING', holder = 'pgbench', lease_token = r.lease_token + 1, leased_until = clock_timestamp() + 60000000::bigint * interval '1 microsecond', updated_at = clock_timestamp() FROM locked WHERE r.id = locked.id AND r.status = 'UNUSED' RETURNING r.id, r.identifier, r.lease_token, r.leased_until
\gset
WITH fenced AS ( DELETE FROM resource_pool WHERE id = :id AND lease_token = :lease_token AND status = 'PENDING' AND (leased_until IS NULL OR leased_until > clock_timestamp()) RETURNING id, lease_token ) INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced) SELECT id, lease_token, 'pgbench-' || :id, 'pgbench', '', true FROM fenced RETURNING id, resource_id, lease_token, created_at, 0;
SQL
# side: take the lowest free id (SKIP LOCKED), lease it at its next token;
# the commit deletes the live lease and writes the ledger from it.
cat >"$tmp/side.sql" <<'SQL'
WITH taken AS ( DELETE FROM free WHERE id = (SELECT id FROM free ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED) RETURNING id, next_token ) INSERT INTO lease (id, holder, token, leased_until) SELECT id, 'pgbench', next_token, clock_timestamp() + 60000000::bigint * interval '1 microsecond' FROM taken RETURNING id, token AS lease_token, leased_until
\gset
WITH fenced AS ( DELETE FROM lease WHERE id = :id AND token = :lease_token AND leased_until > clock_timestamp() RETURNING id, token ) INSERT INTO business_ledger (resource_id, lease_token, request_id, holder, payload, fenced) SELECT id, token, 'pgbench-' || :id, 'pgbench', '', true FROM fenced RETURNING id, resource_id, lease_token, created_at, 0;
SQL

lsn() { psql -c "SELECT (pg_current_wal_insert_lsn() - '0/0')::bigint"; }
ledger() { psql -c "SELECT count(*) FROM $1.business_ledger"; }

printf '\n%-9s %7s %10s %14s %12s\n' layout clients cycles/s "WAL B/cycle" "vs contract"
declare -A base
for c in $CLIENTS; do
  for layout in contract side del; do
    psql -c "CHECKPOINT" >/dev/null
    n0=$(ledger "$layout")
    w0=$(lsn)
    PGOPTIONS="-c search_path=$layout" "$pgbin/pgbench" -n -M prepared -h 127.0.0.1 -p "$PORT" -U postgres \
      -c "$c" -j "$(( c < 2 ? c : 2 ))" -T "$DUR" -f "$tmp/$layout.sql" postgres >"$tmp/out" 2>&1 ||
      { echo "$layout at $c clients: pgbench failed: $(grep -m1 -i error "$tmp/out")"; exit 1; }
    w1=$(lsn)
    n1=$(ledger "$layout")
    cycles=$(( n1 - n0 ))
    rate=$(( cycles / DUR ))
    [ "$layout" = contract ] && base[$c]=$rate
    ratio=$(awk -v r="$rate" -v b="${base[$c]}" 'BEGIN { printf "%.2f×", r / b }')
    printf '%-9s %7s %10s %14s %12s\n' "$layout" "$c" "$rate" "$(( (w1 - w0) / cycles ))" "$ratio"
  done
done

# The guarantee on each layout: one fenced effect per id, nothing consumed
# without its effect, and a stale token rejected once its lease was reaped
# and the id claimed again.
echo
bad=0
check() { # layout, query that must return 0
  local got
  got=$(psql -c "$2")
  if [ "$got" != 0 ]; then echo "$1: $got rows break: $2"; bad=1; fi
}
check contract "SELECT count(*) FROM contract.resource_pool p WHERE (p.status = 'CONSUMED') <> EXISTS (SELECT 1 FROM contract.business_ledger b WHERE b.resource_id = p.id)"
check del "SELECT count(*) FROM del.business_ledger b WHERE EXISTS (SELECT 1 FROM del.resource_pool p WHERE p.id = b.resource_id)"
check side "SELECT count(*) FROM side.business_ledger b WHERE EXISTS (SELECT 1 FROM side.free f WHERE f.id = b.resource_id) OR EXISTS (SELECT 1 FROM side.lease l WHERE l.id = b.resource_id)"
check side "SELECT count(*) FROM side.pool p WHERE (SELECT count(*) FROM side.free f WHERE f.id = p.id) + (SELECT count(*) FROM side.lease l WHERE l.id = p.id) + (SELECT count(*) FROM side.business_ledger b WHERE b.resource_id = p.id) <> 1"
# Fencing on the side layout: lease an id for 1 ms, reap it (back to free
# at token + 1), lease it again; the first holder's commit writes nothing.
fence=$(psql <<'SQL'
SET search_path = side;
WITH taken AS (DELETE FROM free WHERE id = (SELECT id FROM free ORDER BY id LIMIT 1) RETURNING id, next_token)
INSERT INTO lease SELECT id, 'zombie', next_token, clock_timestamp() + interval '1 millisecond' FROM taken;
SELECT pg_sleep(0.01);
WITH reaped AS (DELETE FROM lease WHERE leased_until < clock_timestamp() RETURNING id, token)
INSERT INTO free SELECT id, token + 1 FROM reaped;
CREATE TEMP TABLE z AS SELECT id, next_token - 1 AS stale FROM free ORDER BY id LIMIT 1;
WITH taken AS (DELETE FROM free WHERE id = (SELECT id FROM z) RETURNING id, next_token)
INSERT INTO lease SELECT id, 'new', next_token, clock_timestamp() + interval '1 minute' FROM taken;
WITH fenced AS (DELETE FROM lease WHERE id = (SELECT id FROM z) AND token = (SELECT stale FROM z) AND leased_until > clock_timestamp() RETURNING id, token)
SELECT count(*) FROM fenced;
SQL
)
if [ "$(echo "$fence" | tail -1)" != 0 ]; then echo "side: a stale token's commit went through"; bad=1; fi
if [ "$bad" = 0 ]; then
  echo "invariants hold on every layout: one fenced effect per id, none consumed without it; side rejects a stale token after a reap"
fi
exit "$bad"
