#!/usr/bin/env python3
"""ADBC smoke test of Cairn's Arrow Flight SQL endpoint.

Usage:
    adbc_smoke.py [PORT]        # or set CAIRN_FLIGHT_PORT (default 50051)

Needs the ADBC Flight SQL driver and pyarrow:
    python3 -m venv ~/.cache/cairn-venv
    ~/.cache/cairn-venv/bin/pip install "adbc-driver-flightsql==1.13.0" \
        "adbc-driver-manager==1.13.0" pyarrow

Against a running Flight SQL server on 127.0.0.1:PORT it creates a uniquely named
table, inserts rows (execute, executemany, executescript), reads them back (plain and
parameterized queries, Arrow tables and DB-API rows), checks the metadata calls
(get_info, get_objects, get_table_schema, get_table_types) and two error paths, then
drops the table. Prints one line per check; exits non-zero on the first failure.
"""

import os
import sys
import time
import uuid

import pyarrow as pa

try:
    import adbc_driver_flightsql.dbapi as flight_sql
except ImportError as e:  # pragma: no cover - depends on the environment
    print(f"SKIP: the ADBC Flight SQL driver is not installed ({e})", file=sys.stderr)
    sys.exit(2)


class CheckFailed(Exception):
    pass


def check(cond, what, detail=None):
    if not cond:
        raise CheckFailed(f"{what}" + (f": {detail!r}" if detail is not None else ""))
    print(f"ok   {what}")


def expect_error(cur, sql, sqlstate, what):
    try:
        cur.execute(sql)
        cur.fetch_arrow_table()
    except flight_sql.Error as e:
        check(sqlstate in str(e), what, str(e))
        return
    raise CheckFailed(f"{what}: no error for {sql!r}")


def find_table(objects, table):
    """The entry of `table` in adbc_get_objects' nested catalog/schema/table lists."""
    for cat in objects:
        if cat["catalog_name"] != "cairn":
            continue
        for sch in cat["catalog_db_schemas"] or []:
            if sch["db_schema_name"] != "public":
                continue
            for t in sch["db_schema_tables"] or []:
                if t["table_name"] == table:
                    return t
    return None


def run(uri):
    table = f"adbc_smoke_{uuid.uuid4().hex[:12]}"
    names = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight",
             "nine", "ten"]
    with flight_sql.connect(uri, autocommit=True) as conn:
        info = conn.adbc_get_info()
        check(info.get("vendor_name") == "Cairn", "get_info names the server Cairn",
              info.get("vendor_name"))
        check(bool(info.get("vendor_version")), "get_info has a server version",
              info.get("vendor_version"))

        created = False
        try:
            with conn.cursor() as cur:
                cur.execute(
                    f"CREATE TABLE {table} (k INT PRIMARY KEY, v VARCHAR, x DOUBLE)")
                created = True
                check(True, f"CREATE TABLE {table}")

                values = ", ".join(f"({k}, '{names[k]}', {k}.5)" for k in range(1, 11))
                cur.execute(f"INSERT INTO {table} VALUES {values}")
                counts = cur.fetch_arrow_table()
                check(counts.num_rows == 1 and counts.column(0).to_pylist() == [10],
                      "INSERT through execute returns the affected count",
                      counts.to_pylist())

                cur.execute(f"SELECT k, v, x FROM {table} ORDER BY k")
                t = cur.fetch_arrow_table()
                check(isinstance(t, pa.Table) and t.num_rows == 10,
                      "SELECT returns 10 rows", t.num_rows)
                check(t.column("k").to_pylist() == list(range(1, 11)),
                      "rows come back in order", t.column("k").to_pylist())
                check(t.schema.field("k").type == pa.int32()
                      and t.schema.field("v").type in (pa.string(), pa.large_string(),
                                                       pa.string_view())
                      and t.schema.field("x").type == pa.float64(),
                      "result types are INT, VARCHAR, DOUBLE", str(t.schema))

                cur.execute(f"SELECT v FROM {table} WHERE k = ?", (5,))
                t = cur.fetch_arrow_table()
                check(t.column("v").to_pylist() == ["five"],
                      "parameterized query (k = ?, 5)", t.to_pylist())
                cur.execute(f"SELECT v FROM {table} WHERE k = ?", (7,))
                check(cur.fetchall() == [("seven",)],
                      "the same statement with another parameter (DB-API rows)")

                cur.executemany(f"INSERT INTO {table} (k, v, x) VALUES (?, ?, ?)",
                                [(11, "eleven", 11.5), (12, "twelve", None)])
                check(True, "executemany INSERT with two parameter rows")

                cur.executescript(f"UPDATE {table} SET v = 'TWO' WHERE k = 2")
                check(True, "executescript UPDATE (DoPut statement update)")

                cur.execute(f"SELECT count(*) AS n FROM {table}")
                n = cur.fetch_arrow_table().column("n").to_pylist()
                check(n == [12], "12 rows after executemany", n)

                cur.execute(f"SELECT k, v, x FROM {table} WHERE k IN (2, 12) ORDER BY k")
                rows = cur.fetchall()
                check(rows == [(2, "TWO", 2.5), (12, "twelve", None)],
                      "UPDATE and NULL parameter are visible", rows)

            objects = conn.adbc_get_objects(
                depth="all", catalog_filter="cairn", table_name_filter=table
            ).read_all().to_pylist()
            entry = find_table(objects, table)
            check(entry is not None, "get_objects lists the table under cairn.public",
                  objects)
            check(entry["table_type"] == "TABLE", "its table type is TABLE",
                  entry["table_type"])
            cols = [c["column_name"] for c in entry["table_columns"] or []]
            check(cols == ["k", "v", "x"], "get_objects lists its columns", cols)

            schema = conn.adbc_get_table_schema(table)
            check(schema.names == ["k", "v", "x"], "get_table_schema names the columns",
                  schema.names)
            check(schema.field("k").type == pa.int32() and not schema.field("k").nullable,
                  "the key column is a non-null INT", str(schema.field("k")))

            types = conn.adbc_get_table_types()
            check("TABLE" in types, "get_table_types lists TABLE", types)

            with conn.cursor() as cur:
                expect_error(cur, f"SELECT * FROM {table}_missing", "42P01",
                             "an unknown table fails with SQLSTATE 42P01")
                expect_error(cur, f"INSERT INTO {table} VALUES (1, 'again', 0.0)",
                             "23505", "a duplicate key fails with SQLSTATE 23505")
                expect_error(cur, "SELEC 1", "42601",
                             "a syntax error fails with SQLSTATE 42601")
                # The connection still works after errors.
                cur.execute("SELECT 1 AS one")
                check(cur.fetchall() == [(1,)], "the connection works after errors")
        finally:
            if created:
                with conn.cursor() as cur:
                    cur.execute(f"DROP TABLE {table}")
                print(f"ok   DROP TABLE {table}")


def main():
    port = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("CAIRN_FLIGHT_PORT",
                                                                  "50051")
    uri = f"grpc://127.0.0.1:{port}"
    start = time.monotonic()
    try:
        run(uri)
    except CheckFailed as e:
        print(f"FAIL {e}", file=sys.stderr)
        return 1
    except Exception as e:  # any driver error is a failure too
        print(f"FAIL {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    print(f"adbc smoke test passed against {uri} in {time.monotonic() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
