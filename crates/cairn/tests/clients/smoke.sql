-- psql smoke test of Cairn's PostgreSQL front end.
--
-- Run:   psql -X -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$CAIRN_PG_PORT" -U cairn cairn -f smoke.sql
--
-- Every check selects a boolean into a variable (\gset) and, when it is false, echoes
-- what failed and queries a table that does not exist: with ON_ERROR_STOP psql then
-- exits with status 3. The table name is unique per run, so runs do not collide.

\set ON_ERROR_STOP 1
\pset pager off
\set fail 'SELECT * FROM "smoke.sql assertion failed"'

-- A unique table name.
SELECT 'psql_smoke_' || CAST(CAST(floor(random() * 1000000000) AS BIGINT) AS VARCHAR) AS t \gset
\echo table :t

-- Session statements drivers and tools send.
SET application_name = 'cairn smoke.sql';
SET extra_float_digits = 3;
SET client_encoding = 'UTF8';
SHOW transaction_isolation;
SELECT version();
SELECT current_schema() = 'public' AS ok \gset
\if :ok
\else
  \echo 'FAIL: current_schema() is not public'
  :fail;
\endif

CREATE TABLE :t (
    id BIGINT PRIMARY KEY,
    name VARCHAR,
    price DECIMAL(10, 2),
    created DATE
);

INSERT INTO :t VALUES
    (1, 'one', 1.50, '2024-01-01'),
    (2, 'two', 2.25, '2024-01-02'),
    (3, NULL, NULL, NULL);

SELECT * FROM :t ORDER BY id;

SELECT count(*) = 3 AS ok FROM :t \gset
\if :ok
\else
  \echo 'FAIL: expected 3 rows after INSERT'
  :fail;
\endif

SELECT count(*) = 1 AS ok FROM :t WHERE name IS NULL AND price IS NULL AND created IS NULL \gset
\if :ok
\else
  \echo 'FAIL: expected one row of NULLs'
  :fail;
\endif

SELECT sum(price) = 3.75 AS ok FROM :t \gset
\if :ok
\else
  \echo 'FAIL: sum(price) is not 3.75'
  :fail;
\endif

UPDATE :t SET name = 'uno', price = 1.75 WHERE id = 1;
SELECT name = 'uno' AND price = 1.75 AS ok FROM :t WHERE id = 1 \gset
\if :ok
\else
  \echo 'FAIL: UPDATE did not change row 1'
  :fail;
\endif

DELETE FROM :t WHERE id = 3;
SELECT count(*) = 2 AS ok FROM :t \gset
\if :ok
\else
  \echo 'FAIL: expected 2 rows after DELETE'
  :fail;
\endif

-- Several statements in one query string run in order.
INSERT INTO :t VALUES (4, 'four', 4.00, '2024-01-04'); SELECT count(*) AS rows_now FROM :t;

-- Transactions are accepted (every statement commits on its own).
BEGIN;
INSERT INTO :t VALUES (5, 'five', 5.00, '2024-01-05');
COMMIT;
SELECT count(*) = 4 AS ok FROM :t \gset
\if :ok
\else
  \echo 'FAIL: expected 4 rows after BEGIN/INSERT/COMMIT'
  :fail;
\endif

-- COPY FROM STDIN with the data in this script, psql's \copy in CSV, and \copy out.
COPY :t (id, name, price, created) FROM STDIN;
10	ten	10.00	2024-01-10
11	\N	\N	\N
\.
SELECT count(*) = 6 AND count(name) = 5 AS ok FROM :t \gset
\if :ok
\else
  \echo 'FAIL: expected 6 rows, 5 names, after COPY FROM STDIN'
  :fail;
\endif
-- psql does not expand variables in \copy: a table of its own.
DROP TABLE IF EXISTS psql_smoke_copy;
CREATE TABLE psql_smoke_copy (id BIGINT PRIMARY KEY, name TEXT, price DECIMAL(10, 2));
\copy psql_smoke_copy (id, name, price) from stdin with (format csv, header)
id,name,price
12,"twelve, with a comma",12.00
13,,
\.
SELECT name = 'twelve, with a comma' AND price = 12.00 AS ok FROM psql_smoke_copy WHERE id = 12 \gset
\if :ok
\else
  \echo 'FAIL: \\copy in CSV did not load row 12'
  :fail;
\endif
SELECT count(*) = 2 AND count(name) = 1 AS ok FROM psql_smoke_copy \gset
\if :ok
\else
  \echo 'FAIL: \\copy in CSV: expected 2 rows, 1 name'
  :fail;
\endif
\copy (SELECT id, name FROM psql_smoke_copy ORDER BY id) to stdout with (format csv, header)
DROP TABLE psql_smoke_copy;

-- psql's catalog commands.
\dt
\d :t
\l

SELECT count(*) = 1 AS ok FROM pg_catalog.pg_class WHERE relname = :'t' \gset
\if :ok
\else
  \echo 'FAIL: the table is not in pg_class'
  :fail;
\endif

DROP TABLE :t;
\echo 'smoke.sql: OK'
