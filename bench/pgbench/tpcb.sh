#!/usr/bin/env bash
# pgbench's TPC-B-like script against a running Cairn pgwire endpoint, with the
# read-modify-write UPDATEs on hot rows (1 branch, 10 tellers, 1,000 accounts), then
# a check that sum(account) = sum(teller) = sum(branch) = sum(history.delta).
#
#   bench/pgbench/tpcb.sh [--host H] [--port P] [--replicas N] [--clients C]
#                         [--transactions T] [--max-tries N] [--postgres]
#
# Defaults: 127.0.0.1:5433 (`cairn local`), replicas 1, 8 clients, 200 transactions
# per client, up to 1000 tries of a transaction that failed with a serialization
# error (SQLSTATE 40001: Cairn's snapshot isolation aborts the later of two
# transactions that update one row, which the hot branch row makes common). --postgres: the server is PostgreSQL (the same tables without Cairn's
# partitioning and replication clauses). It drops and recreates the pgbench_* tables.
# Exit status 0 only if every transaction ran without an error and the balances add up.
set -euo pipefail

host=127.0.0.1 port=5433 replicas=1 clients=8 transactions=200 max_tries=1000 postgres=0
while [ $# -gt 0 ]; do
  case "$1" in
    --host) host=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --replicas) replicas=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --transactions) transactions=$2; shift 2 ;;
    --max-tries) max_tries=$2; shift 2 ;;
    --postgres) postgres=1; shift ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
  esac
done

pgbench=$(command -v pgbench || echo /usr/lib/postgresql/15/bin/pgbench)
[ -x "$pgbench" ] || { echo "pgbench not found: install postgresql-15 (Debian)" >&2; exit 2; }
command -v psql >/dev/null || { echo "psql not found: install postgresql-client" >&2; exit 2; }
export PGHOST=$host PGPORT=$port PGUSER=${PGUSER:-cairn} PGDATABASE=${PGDATABASE:-cairn}
sql() { psql -X -q -v ON_ERROR_STOP=1 -At -c "$1"; }

with="WITH (replicas = $replicas)" hash="PARTITION BY HASH (aid) PARTITIONS 3"
if [ "$postgres" = 1 ]; then with="" hash=""; fi
for t in pgbench_history pgbench_accounts pgbench_tellers pgbench_branches; do
  sql "DROP TABLE IF EXISTS $t"
done
sql "CREATE TABLE pgbench_branches (bid INT PRIMARY KEY, bbalance INT NOT NULL, filler TEXT) $with"
sql "CREATE TABLE pgbench_tellers (tid INT PRIMARY KEY, bid INT, tbalance INT NOT NULL, filler TEXT) $with"
sql "CREATE TABLE pgbench_accounts (aid INT PRIMARY KEY, bid INT, abalance INT NOT NULL, filler TEXT) $hash $with"
sql "CREATE TABLE pgbench_history (hid BIGINT PRIMARY KEY, tid INT, bid INT, aid INT, delta INT, mtime TIMESTAMP) $with"
sql "INSERT INTO pgbench_branches VALUES (1, 0, '')"
sql "INSERT INTO pgbench_tellers SELECT CAST(g AS INT), 1, 0, '' FROM generate_series(1, 10) AS s(g)"
sql "INSERT INTO pgbench_accounts SELECT CAST(g AS INT), 1, 0, '' FROM generate_series(1, 1000) AS s(g)"

# The TPC-B-like transaction (the history table needs a primary key in Cairn).
script="$(dirname "$0")/tpcb.sql"

out=$("$pgbench" -n -c "$clients" -j 2 -t "$transactions" --max-tries "$max_tries" -M prepared -f "$script" 2>&1) || {
  echo "$out"; echo "pgbench failed" >&2; exit 1; }
echo "$out" | grep -E "^(number of clients|number of transactions actually|number of failed|number of transactions retried|total number of retries|latency average|tps)"
expected=$((clients * transactions))
sums=$(sql "SELECT (SELECT sum(abalance) FROM pgbench_accounts), (SELECT sum(tbalance) FROM pgbench_tellers), (SELECT sum(bbalance) FROM pgbench_branches), (SELECT sum(delta) FROM pgbench_history), (SELECT count(*) FROM pgbench_history)")
IFS='|' read -r acc tel bra hist n <<<"$sums"
echo "sum(account) $acc, sum(teller) $tel, sum(branch) $bra, sum(history.delta) $hist, history rows $n"
ok=1
echo "$out" | grep -q "number of transactions actually processed: $expected/$expected" || { echo "not every transaction ran" >&2; ok=0; }
if echo "$out" | grep -q "number of failed transactions" && ! echo "$out" | grep -q "failed transactions: 0 "; then
  echo "some transactions failed" >&2; ok=0
fi
[ "$n" = "$expected" ] || { echo "expected $expected history rows" >&2; ok=0; }
{ [ "$acc" = "$tel" ] && [ "$tel" = "$bra" ] && [ "$bra" = "$hist" ]; } || { echo "the balances do not add up" >&2; ok=0; }
[ $ok = 1 ] && echo "OK: every transaction ran and the balances add up"
[ $ok = 1 ]
