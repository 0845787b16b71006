#!/usr/bin/env python3
"""psycopg 3 smoke test of Cairn's PostgreSQL front end.

Run: python psycopg_smoke.py [PORT]   (default: $CAIRN_PG_PORT, then 5433)

Checks parameters (text and binary), executemany, the Python types of fetched values
(int, float, str, Decimal, date, datetime, None) in text and binary results, row
counts, INSERT ... ON CONFLICT DO UPDATE with parameters, SQLSTATEs of errors (23505
duplicate key, 42P01 unknown table, 22001 value too long, 23502 NULL in a NOT NULL
column, 42P10 a conflict target that is not the key), transactions (ROLLBACK undoes,
isolation until COMMIT, 25P02 after an error, savepoints around reads, ROLLBACK TO
refused after a write, REPEATABLE READ and SerializationFailure, read-only
transactions, DeadlockDetected), conn.cancel() of a long query
and statement_timeout (57014), and COPY: cursor.copy() FROM STDIN in text and CSV
(write_row and raw blocks, awkward values, a failed load, an aborted one) and TO
STDOUT. Tables get unique names and are dropped at the end. Exits non-zero on the
first failure.
"""

import datetime
import decimal
import os
import sys
import threading
import time
import uuid

import psycopg
from psycopg import errors

UTC = datetime.timezone.utc


def port():
    if len(sys.argv) > 1:
        return int(sys.argv[1])
    return int(os.environ.get("CAIRN_PG_PORT", "5433"))


def connect(**kwargs):
    return psycopg.connect(
        host="127.0.0.1",
        port=port(),
        user=os.environ.get("CAIRN_PG_USER", "cairn"),
        password=os.environ.get("CAIRN_PG_PASSWORD"),
        dbname="cairn",
        connect_timeout=10,
        **kwargs,
    )


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def expect_error(cur, sql, params, sqlstate):
    try:
        cur.execute(sql, params)
    except psycopg.Error as e:
        check(e.sqlstate == sqlstate, f"{sql!r}: expected SQLSTATE {sqlstate}, got {e.sqlstate}: {e}")
        return e
    raise AssertionError(f"{sql!r}: expected SQLSTATE {sqlstate}, but it succeeded")


ROW1 = (
    1,
    "alice",
    1.5,
    decimal.Decimal("12.34"),
    datetime.date(2024, 2, 29),
    datetime.datetime(2024, 1, 2, 3, 4, 5, 123456, tzinfo=UTC),
    7,
)
ROW2 = (
    2,
    "bob",
    -2.25,
    decimal.Decimal("-0.05"),
    datetime.date(1999, 12, 31),
    datetime.datetime(1999, 12, 31, 23, 59, 59, tzinfo=UTC),
    -3,
)
ROW3 = (3, None, None, None, None, None, None)


def check_rows(rows, how):
    check(rows == [ROW1, ROW2, ROW3], f"{how}: unexpected rows {rows!r}")
    r1 = rows[0]
    types = [type(v) for v in r1]
    expected = [int, str, float, decimal.Decimal, datetime.date, datetime.datetime, int]
    check(types == expected, f"{how}: unexpected types {types}")
    check(r1[5].utcoffset() == datetime.timedelta(0), f"{how}: timestamp not in UTC: {r1[5]!r}")


def basic(table):
    with connect(autocommit=True) as conn:
        check(conn.info.parameter_status("server_encoding") == "UTF8", "server_encoding")
        check(conn.info.parameter_status("integer_datetimes") == "on", "integer_datetimes")
        cur = conn.cursor()
        cur.execute("SET application_name = 'psycopg_smoke'")
        cur.execute("SHOW transaction_isolation")
        check(cur.fetchone()[0] == "read committed", "SHOW transaction_isolation")
        cur.execute("SELECT version()")
        check(cur.fetchone()[0].startswith("PostgreSQL "), "version()")

        cur.execute(
            f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR, score DOUBLE, "
            "price DECIMAL(10, 2), born DATE, seen TIMESTAMP, small INT)"
        )

        # Parameters bound server-side (extended protocol), in text.
        cur.execute(f"INSERT INTO {table} VALUES (%s, %s, %s, %s, %s, %s, %s)", ROW1)
        check(cur.rowcount == 1, f"INSERT rowcount {cur.rowcount}")
        cur.executemany(
            f"INSERT INTO {table} (id, name, score, price, born, seen, small) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)",
            [ROW2, ROW3],
        )
        check(cur.rowcount == 2, f"executemany rowcount {cur.rowcount}")

        select = f"SELECT id, name, score, price, born, seen, small FROM {table} ORDER BY id"
        cur.execute(select)
        check_rows(cur.fetchall(), "text results")
        check([d.name for d in cur.description][:3] == ["id", "name", "score"], "description")
        # Unaliased function calls get PostgreSQL's names (the extended protocol's).
        cur.execute(f"SELECT count(*), max(id), min(id) AS lowest FROM {table}")
        names = [d.name for d in cur.description]
        check(names[:3] == ["count", "max", "lowest"], f"aggregate column names: {names}")
        # A select list may repeat a column, as in PostgreSQL.
        cur.execute(f"SELECT id, id, count(*), count(*) FROM {table} WHERE id = 1 GROUP BY id")
        names = [d.name for d in cur.description]
        check(cur.fetchall() == [(1, 1, 1, 1)], "repeated select items")
        check(names == ["id", "id", "count", "count"], f"repeated column names: {names}")

        # Binary results.
        bcur = conn.cursor(binary=True)
        bcur.execute(select)
        check_rows(bcur.fetchall(), "binary results")

        # Binary parameters (%b) of several types.
        cur.execute(
            f"SELECT id FROM {table} WHERE id = %b AND name = %b AND price = %b AND born = %b AND seen = %b",
            (1, "alice", decimal.Decimal("12.34"), datetime.date(2024, 2, 29), ROW1[5]),
        )
        check(cur.fetchall() == [(1,)], "binary parameters")
        cur.execute(f"SELECT name FROM {table} WHERE id = %s", (2,))
        check(cur.fetchone() == ("bob",), "text parameter in WHERE")
        cur.execute(f"SELECT count(*) FROM {table} WHERE name IS NULL")
        check(cur.fetchone() == (1,), "IS NULL")

        # A simple-protocol query (no parameters) with several statements.
        cur.execute(f"SELECT 1; SELECT count(*) FROM {table}", prepare=False)

        # UPDATE / DELETE counts.
        cur.execute(f"UPDATE {table} SET score = %s WHERE id = %s", (9.5, 1))
        check(cur.rowcount == 1, f"UPDATE rowcount {cur.rowcount}")
        cur.execute(f"SELECT score FROM {table} WHERE id = 1")
        check(cur.fetchone() == (9.5,), "UPDATE result")
        cur.execute(f"DELETE FROM {table} WHERE id = %s", (3,))
        check(cur.rowcount == 1, f"DELETE rowcount {cur.rowcount}")

        # INSERT ... ON CONFLICT (key) DO UPDATE with bound parameters and EXCLUDED.
        upsert = (f"INSERT INTO {table} AS t (id, name, small) VALUES (%s, %s, %s) "
                  "ON CONFLICT (id) DO UPDATE SET small = t.small + EXCLUDED.small, "
                  "name = EXCLUDED.name")
        cur.execute(f"CREATE TABLE {table}_up (id BIGINT PRIMARY KEY, name VARCHAR, small INT)")
        try:
            up = upsert.replace(f"{table} AS t", f"{table}_up AS t")
            cur.execute(up, (1, "new", 5))
            check(cur.rowcount == 1, f"upsert of a new key: {cur.rowcount}")
            cur.executemany(up, [(1, "again", 2), (2, "other", 1)])
            cur.execute(f"SELECT id, name, small FROM {table}_up ORDER BY id")
            check(cur.fetchall() == [(1, "again", 7), (2, "other", 1)],
                  "upsert with EXCLUDED and a bound parameter")
            expect_error(cur, f"INSERT INTO {table}_up VALUES (1, 'x', 1) "
                         "ON CONFLICT (name) DO UPDATE SET small = 0", None, "42P10")
        finally:
            cur.execute(f"DROP TABLE {table}_up")

        # SQLSTATEs.
        e = expect_error(cur, f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (1, "again"), "23505")
        check(isinstance(e, errors.UniqueViolation), f"duplicate key: {type(e)}")
        e = expect_error(cur, "SELECT * FROM no_such_table_psycopg_smoke", None, "42P01")
        check(isinstance(e, errors.UndefinedTable), f"unknown table: {type(e)}")
        # Constraint and value errors carry PostgreSQL's SQLSTATEs, whether the value
        # is a literal or a bound parameter.
        cur.execute(f"CREATE TABLE {table}_codes (id BIGINT PRIMARY KEY, short VARCHAR(3), "
                    "must TEXT NOT NULL)")
        try:
            e = expect_error(cur, f"INSERT INTO {table}_codes VALUES (1, 'toolong', 'x')",
                             None, "22001")
            check(isinstance(e, errors.StringDataRightTruncation), f"too long: {type(e)}")
            expect_error(cur, f"INSERT INTO {table}_codes VALUES (%s, %s, %s)",
                         (1, "toolong", "x"), "22001")
            e = expect_error(cur, f"INSERT INTO {table}_codes VALUES (2, 'ok', NULL)", None,
                             "23502")
            check(isinstance(e, errors.NotNullViolation), f"NULL: {type(e)}")
            expect_error(cur, f"INSERT INTO {table}_codes VALUES (%s, %s, %s)", (2, "ok", None),
                         "23502")
            expect_error(cur, f"INSERT INTO {table}_codes (id, short) VALUES (3, 'ok')", None,
                         "23502")
            cur.execute(f"INSERT INTO {table}_codes VALUES (4, 'ok', 'x')")
            expect_error(cur, f"UPDATE {table}_codes SET must = NULL WHERE id = 4", None, "23502")
            expect_error(cur, f"UPDATE {table}_codes SET short = 'toolong' WHERE id = 4", None,
                         "22001")
        finally:
            cur.execute(f"DROP TABLE {table}_codes")
        # The connection stays usable.
        cur.execute("SELECT 1")
        check(cur.fetchone() == (1,), "SELECT 1 after errors")

    # Without autocommit psycopg wraps statements in BEGIN ... COMMIT.
    with connect() as conn:
        cur = conn.cursor()
        cur.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (10, "tx"))
        conn.commit()
        cur.execute(f"SELECT name FROM {table} WHERE id = 10")
        check(cur.fetchone() == ("tx",), "row inserted in a transaction")
        try:
            cur.execute("SELECT * FROM no_such_table_psycopg_smoke")
            raise AssertionError("expected an error")
        except errors.UndefinedTable:
            conn.rollback()
        cur.execute(f"SELECT count(*) FROM {table}")
        check(cur.fetchone() == (3,), "count after rollback")
        conn.commit()
        # An error fails the transaction block: 25P02 until ROLLBACK.
        try:
            cur.execute("SELECT 1/0")
            raise AssertionError("expected division by zero")
        except errors.DivisionByZero:
            pass
        e = expect_error(cur, "SELECT 1", None, "25P02")
        check(isinstance(e, errors.InFailedSqlTransaction), f"failed block: {type(e)}")
        conn.rollback()
        # A nested transaction (SAVEPOINT) around reads: a failure inside rolls back to
        # the savepoint, and the outer transaction goes on, as in PostgreSQL.
        with conn.transaction():
            cur.execute(f"SELECT count(*) FROM {table}")
            try:
                with conn.transaction():
                    cur.execute("SELECT * FROM no_such_table_psycopg_smoke")
            except errors.UndefinedTable:
                pass
            cur.execute(f"SELECT count(*) FROM {table}")
            check(cur.fetchone() == (3,), "reads after ROLLBACK TO SAVEPOINT")
        # The block's writes are its own until COMMIT, and ROLLBACK discards them.
        cur.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (11, "tx"))
        cur.execute(f"UPDATE {table} SET name = %s WHERE id = %s", ("changed", 10))
        cur.execute(f"SELECT count(*) FROM {table}")
        check(cur.fetchone() == (4,), "the block sees its own insert")
        with connect(autocommit=True) as other:
            ocur = other.cursor()
            ocur.execute(f"SELECT count(*) FROM {table}")
            check(ocur.fetchone() == (3,), "another connection does not see the block's insert")
            ocur.execute(f"SELECT name FROM {table} WHERE id = 10")
            check(ocur.fetchone() == ("tx",), "nor its update")
        conn.rollback()
        cur.execute(f"SELECT count(*) FROM {table}")
        check(cur.fetchone() == (3,), "ROLLBACK discarded the insert")
        cur.execute(f"SELECT name FROM {table} WHERE id = 10")
        check(cur.fetchone() == ("tx",), "ROLLBACK discarded the update")
        conn.commit()
        # After a write, rolling back to a savepoint would have to undo part of the
        # transaction, which Cairn cannot: refused (0A000); ROLLBACK undoes it all.
        cur.execute("SAVEPOINT s1")
        cur.execute(f"INSERT INTO {table} (id, name) VALUES (%s, %s)", (11, "sp"))
        e = expect_error(cur, "ROLLBACK TO SAVEPOINT s1", None, "0A000")
        check("ROLLBACK TO SAVEPOINT" in str(e), f"ROLLBACK TO refusal: {e}")
        conn.rollback()
        cur.execute(f"SELECT count(*) FROM {table} WHERE id = 11")
        check(cur.fetchone() == (0,), "ROLLBACK after the refused ROLLBACK TO")
        conn.commit()
        # Isolation levels: SHOW reports them; REPEATABLE READ keeps its snapshot and
        # refuses to update a row changed since (SerializationFailure, 40001).
        cur.execute("SHOW transaction_isolation")
        check(cur.fetchone() == ("read committed",), "default isolation")
        conn.commit()
    with connect() as conn, connect(autocommit=True) as other:
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        cur, ocur = conn.cursor(), other.cursor()
        cur.execute("SHOW transaction_isolation")
        check(cur.fetchone() == ("repeatable read",), "isolation set by psycopg")
        cur.execute(f"SELECT name FROM {table} WHERE id = 10")
        check(cur.fetchone() == ("tx",), "first read")
        ocur.execute(f"UPDATE {table} SET name = %s WHERE id = %s", ("other", 10))
        cur.execute(f"SELECT name FROM {table} WHERE id = 10")
        check(cur.fetchone() == ("tx",), "repeatable read keeps its snapshot")
        try:
            cur.execute(f"UPDATE {table} SET name = %s WHERE id = %s", ("mine", 10))
            raise AssertionError("expected a serialization failure")
        except errors.SerializationFailure:
            conn.rollback()
        cur.execute(f"SELECT name FROM {table} WHERE id = 10")
        check(cur.fetchone() == ("other",), "a new transaction sees the other's update")
        conn.commit()
    # A read-only transaction refuses writes (25006).
    with connect() as conn:
        conn.read_only = True
        cur = conn.cursor()
        try:
            cur.execute(f"DELETE FROM {table} WHERE id = 10")
            raise AssertionError("expected a read-only error")
        except errors.ReadOnlySqlTransaction:
            conn.rollback()
    # A deadlock between two transactions: one gets DeadlockDetected (40P01), the
    # other goes on.
    with connect() as a, connect() as b:
        ca, cb = a.cursor(), b.cursor()
        ca.execute(f"UPDATE {table} SET name = 'a' WHERE id = 1")
        cb.execute(f"UPDATE {table} SET name = 'b' WHERE id = 2")
        outcome = {}

        def second_update():
            try:
                ca.execute(f"UPDATE {table} SET name = 'a' WHERE id = 2")
                outcome["a"] = "ok"
            except psycopg.Error as e:
                outcome["a"] = e

        t = threading.Thread(target=second_update)
        t.start()
        time.sleep(0.2)
        try:
            cb.execute(f"UPDATE {table} SET name = 'b' WHERE id = 1")
            outcome["b"] = "ok"
        except psycopg.Error as e:
            outcome["b"] = e
        # A loser's rollback lets the other's wait end.
        if outcome["b"] != "ok":
            b.rollback()
        t.join(timeout=30)
        check(not t.is_alive(), "the waiting update ended")
        if outcome["a"] != "ok":
            a.rollback()
        losers = [k for k, v in outcome.items() if v != "ok"]
        check(len(losers) >= 1, f"one transaction must lose: {outcome}")
        for k in losers:
            check(isinstance(outcome[k], errors.DeadlockDetected), f"deadlock: {outcome[k]!r}")
        for k, conn in (("a", a), ("b", b)):
            if k not in losers:
                conn.commit()


def copy(table):
    """COPY FROM STDIN and TO STDOUT through psycopg's cursor.copy()."""
    with connect(autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(
            f"CREATE TABLE {table} (id BIGINT PRIMARY KEY, name VARCHAR, price DECIMAL(10, 2), "
            "d DATE, ts TIMESTAMPTZ, ok BOOLEAN, raw BYTEA, score DOUBLE PRECISION)"
        )
        awkward = "tab\there, newline\nthere, back\\slash, comma, \"quote\", é"
        rows = [
            (1, "plain", decimal.Decimal("1.50"), datetime.date(2024, 1, 1),
             datetime.datetime(2024, 1, 1, 12, 30, tzinfo=UTC), True, b"\x00\xffab", 0.5),
            (2, awkward, None, None, None, False, None, None),
            (3, "", decimal.Decimal("-3.25"), datetime.date(1999, 12, 31), None, None, b"", -1e10),
        ]
        # Text format, one row at a time (psycopg adapts the values).
        with cur.copy(f"COPY {table} FROM STDIN") as cp:
            for r in rows:
                cp.write_row(r)
        check(cur.rowcount == 3, f"COPY FROM STDIN rowcount {cur.rowcount}")
        cur.execute(f"SELECT * FROM {table} ORDER BY id")
        got = cur.fetchall()
        check(got == rows, f"rows after COPY FROM STDIN: {got!r}")

        # CSV with a header and a column list, sent as raw blocks split mid-line.
        data = "id,name\n10,\"a,b\"\n11,\n12,\"multi\nline\"\n".encode()
        with cur.copy(f"COPY {table} (id, name) FROM STDIN WITH (FORMAT csv, HEADER true)") as cp:
            for i in range(0, len(data), 7):
                cp.write(data[i:i + 7])
        check(cur.rowcount == 3, f"COPY CSV rowcount {cur.rowcount}")
        cur.execute(f"SELECT id, name FROM {table} WHERE id >= 10 ORDER BY id")
        got = cur.fetchall()
        check(got == [(10, "a,b"), (11, None), (12, "multi\nline")], f"CSV rows: {got!r}")

        # Many rows: several batches and messages.
        with cur.copy(f"COPY {table} (id, name) FROM STDIN") as cp:
            for i in range(1000, 21000):
                cp.write_row((i, f"row {i}"))
        check(cur.rowcount == 20000, f"big COPY rowcount {cur.rowcount}")
        cur.execute(f"SELECT count(*), sum(id) FROM {table} WHERE id >= 1000")
        check(cur.fetchone() == (20000, sum(range(1000, 21000))), "big COPY rows")

        # A bad value fails the COPY with the SQLSTATE PostgreSQL uses; the connection
        # goes on.
        try:
            with cur.copy(f"COPY {table} (id, name) FROM STDIN") as cp:
                cp.write(b"50\tfine\nnot-a-number\tbad\n")
            raise AssertionError("COPY of a bad number succeeded")
        except psycopg.Error as e:
            check(e.sqlstate == "22P02", f"bad value SQLSTATE {e.sqlstate}: {e}")
        try:
            with cur.copy(f"COPY {table} (id, name) FROM STDIN") as cp:
                cp.write(b"60\tone field too many\textra\n")
            raise AssertionError("COPY of a row with an extra field succeeded")
        except psycopg.Error as e:
            check(e.sqlstate == "22P04", f"extra field SQLSTATE {e.sqlstate}: {e}")
        # A duplicate key fails with 23505.
        try:
            with cur.copy(f"COPY {table} (id) FROM STDIN") as cp:
                cp.write_row((1,))
            raise AssertionError("COPY of a duplicate key succeeded")
        except psycopg.Error as e:
            check(e.sqlstate == "23505", f"duplicate key SQLSTATE {e.sqlstate}: {e}")
        # The client gives up: CopyFail, 57014.
        try:
            with cur.copy(f"COPY {table} (id) FROM STDIN") as cp:
                cp.write_row((70,))
                raise RuntimeError("the client gives up")
        except RuntimeError:
            pass
        except psycopg.Error as e:
            check(e.sqlstate == "57014", f"CopyFail SQLSTATE {e.sqlstate}: {e}")
        cur.execute("SELECT 1")
        check(cur.fetchone() == (1,), "SELECT 1 after failed COPYs")
        expect_error(cur, "COPY no_such_table_anywhere FROM STDIN", None, "42P01")
        expect_error(cur, f"COPY {table} FROM STDIN (FORMAT binary)", None, "0A000")

        # COPY TO STDOUT in text and CSV, read back by psycopg.
        with cur.copy(f"COPY (SELECT id, name, price, ok FROM {table} WHERE id < 10 "
                      "ORDER BY id) TO STDOUT") as cp:
            out = [r for r in cp.rows()]
        check(out == [("1", "plain", "1.50", "t"), ("2", awkward, None, "f"),
                      ("3", "", "-3.25", None)], f"COPY TO STDOUT rows: {out!r}")
        with cur.copy(f"COPY {table} (id, name) TO STDOUT WITH (FORMAT csv, HEADER)") as cp:
            text = b"".join(bytes(b) for b in cp).decode()
        lines = text.split("\n")
        check(lines[0] == "id,name", f"CSV header {lines[0]!r}")
        check("10,\"a,b\"" in lines and "11," in lines and "3,\"\"" in lines,
              f"CSV lines: {lines[:12]!r}")
        check(cur.rowcount == 20000 + 3 + 3, f"COPY TO rowcount {cur.rowcount}")

        # A table without a primary key: COPY fills its hidden key, keeps duplicates
        # and never sends the hidden column back.
        cur.execute(f"CREATE TABLE {table}_keyless (tag TEXT, n INT)")
        try:
            with cur.copy(f"COPY {table}_keyless FROM STDIN") as cp:
                for i in range(3000):
                    cp.write_row(("same", i % 3))
            check(cur.rowcount == 3000, f"keyless COPY rowcount {cur.rowcount}")
            cur.execute(f"SELECT count(*), count(DISTINCT n) FROM {table}_keyless")
            check(cur.fetchone() == (3000, 3), "keyless COPY rows")
            with cur.copy(f"COPY {table}_keyless TO STDOUT") as cp:
                rows = list(cp.rows())
            check(len(rows) == 3000 and len(rows[0]) == 2, f"keyless COPY TO: {rows[:2]}")
        finally:
            cur.execute(f"DROP TABLE {table}_keyless")

    # In a transaction block (psycopg's default): COPY's rows are the block's,
    # ROLLBACK undoes them, COMMIT publishes them, a failed COPY fails the block.
    with connect() as conn, connect(autocommit=True) as other:
        cur, seen = conn.cursor(), other.cursor()
        total = f"SELECT count(*) FROM {table} WHERE id >= 100000"
        with cur.copy(f"COPY {table} (id, name) FROM STDIN") as cp:
            for i in range(100000, 100500):
                cp.write_row((i, "in a block"))
        cur.execute(total)
        check(cur.fetchone() == (500,), "the block sees its COPY")
        seen.execute(total)
        check(seen.fetchone() == (0,), "another session does not see an uncommitted COPY")
        conn.rollback()
        seen.execute(total)
        check(seen.fetchone() == (0,), "ROLLBACK undoes a COPY")
        with cur.copy(f"COPY {table} (id, name) FROM STDIN") as cp:
            for i in range(100000, 100500):
                cp.write_row((i, "committed"))
        conn.commit()
        seen.execute(total)
        check(seen.fetchone() == (500,), "COMMIT publishes a COPY")
        try:
            with cur.copy(f"COPY {table} (id) FROM STDIN") as cp:
                cp.write_row((100000,))
            raise AssertionError("COPY of a duplicate key succeeded in a block")
        except psycopg.Error as e:
            check(e.sqlstate == "23505", f"duplicate key in a block: {e.sqlstate}: {e}")
        expect_error(cur, "SELECT 1", None, "25P02")
        conn.rollback()


def cancel(big):
    with connect(autocommit=True) as conn:
        cur = conn.cursor()
        cur.execute(f"CREATE TABLE {big} (id BIGINT PRIMARY KEY)")
        values = ", ".join(f"({i})" for i in range(2000))
        cur.execute(f"INSERT INTO {big} VALUES {values}")
        check(cur.rowcount == 2000, f"big INSERT rowcount {cur.rowcount}")

        timer = threading.Timer(1.0, conn.cancel)
        timer.start()
        started = time.monotonic()
        try:
            cur.execute(
                f"SELECT count(*) FROM {big} a, {big} b, {big} c WHERE a.id + b.id + c.id >= 0"
            )
            raise AssertionError("the 8e9-row cross join finished: expected it to be canceled")
        except errors.QueryCanceled as e:
            check(e.sqlstate == "57014", f"cancel SQLSTATE {e.sqlstate}")
        finally:
            timer.cancel()
        elapsed = time.monotonic() - started
        check(elapsed < 30, f"cancel took {elapsed:.1f} s")
        cur.execute("SELECT 1")
        check(cur.fetchone() == (1,), "SELECT 1 after cancel")

        # statement_timeout ends a statement with the same SQLSTATE.
        cur.execute("SET statement_timeout = '500ms'")
        try:
            cur.execute(
                f"SELECT count(*) FROM {big} a, {big} b, {big} c WHERE a.id + b.id + c.id >= 0"
            )
            raise AssertionError("the 8e9-row cross join finished within statement_timeout")
        except errors.QueryCanceled as e:
            check(e.sqlstate == "57014", f"statement_timeout SQLSTATE {e.sqlstate}")
            check("statement timeout" in str(e), f"statement_timeout message: {e}")
        cur.execute("RESET statement_timeout")
        cur.execute("SELECT 1")
        check(cur.fetchone() == (1,), "SELECT 1 after statement_timeout")


def main():
    suffix = uuid.uuid4().hex[:12]
    table = f"psycopg_smoke_{suffix}"
    big = f"psycopg_smoke_big_{suffix}"
    copied = f"psycopg_smoke_copy_{suffix}"
    try:
        basic(table)
        copy(copied)
        cancel(big)
    finally:
        try:
            with connect(autocommit=True) as conn:
                for t in (table, big, copied):
                    conn.execute(f"DROP TABLE IF EXISTS {t}")
        except psycopg.Error as e:
            print(f"cleanup failed: {e}", file=sys.stderr)
    print("psycopg_smoke.py: OK")


if __name__ == "__main__":
    main()
