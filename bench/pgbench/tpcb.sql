\set aid random(1, 1000)
\set bid 1
\set tid random(1, 10)
\set delta random(-5000, 5000)
\set hid random(1, 9000000000000000000)
BEGIN;
UPDATE pgbench_accounts SET abalance = abalance + :delta WHERE aid = :aid;
SELECT abalance FROM pgbench_accounts WHERE aid = :aid;
UPDATE pgbench_tellers SET tbalance = tbalance + :delta WHERE tid = :tid;
UPDATE pgbench_branches SET bbalance = bbalance + :delta WHERE bid = :bid;
INSERT INTO pgbench_history (hid, tid, bid, aid, delta, mtime) VALUES (:hid, :tid, :bid, :aid, :delta, CURRENT_TIMESTAMP);
END;
