#!/usr/bin/env python3
"""SQLAlchemy 2 and pandas smoke test of Cairn's PostgreSQL front end.

Run: python sqlalchemy_smoke.py [PORT]   (default: $CAIRN_PG_PORT, then 5433)

What an ORM and a data frame library ask of the catalog and the session, through the
real libraries over psycopg 3:
- connecting (SQLAlchemy's dialect looks up types with to_regtype inside a savepoint);
- the inspector: get_table_names, has_table, get_columns (types, nullability),
  get_pk_constraint (a composite key in key order, not column order), get_indexes,
  get_foreign_keys, and Table(..., autoload_with=...) reflection;
- pandas: DataFrame.to_sql appending to a keyed table, read_sql with parameters,
  read_sql_table; to_sql creating a table of its own (no primary key: a hidden
  auto-incrementing key; with pandas' index column and CREATE INDEX) and replacing it;
- begin_nested(): a failed read inside a savepoint rolls back to it and the outer
  transaction goes on.
Tables get unique names and are dropped at the end. Exits non-zero on the first
failure.
"""

import os
import sys
import uuid

import pandas as pd
import sqlalchemy as sa


def port():
    if len(sys.argv) > 1:
        return int(sys.argv[1])
    return int(os.environ.get("CAIRN_PG_PORT", "5433"))


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    user = os.environ.get("CAIRN_PG_USER", "cairn")
    engine = sa.create_engine(f"postgresql+psycopg://{user}@127.0.0.1:{port()}/cairn")
    suffix = uuid.uuid4().hex[:8]
    keyed = f"sa_keyed_{suffix}"
    frame = f"sa_frame_{suffix}"
    fresh = f"sa_fresh_{suffix}"
    with engine.begin() as conn:
        conn.execute(sa.text(
            f"CREATE TABLE {keyed} (region TEXT, id BIGINT, name VARCHAR(20) NOT NULL, "
            "score DOUBLE PRECISION, PRIMARY KEY (id, region))"))
        conn.execute(sa.text(f"CREATE TABLE {frame} (a BIGINT PRIMARY KEY, b TEXT)"))
    try:
        inspector = sa.inspect(engine)
        names = inspector.get_table_names()
        check(keyed in names and frame in names, f"get_table_names: {names}")
        check(inspector.has_table(keyed), "has_table")
        check(not inspector.has_table(f"no_such_{suffix}"), "has_table of a missing table")

        columns = inspector.get_columns(keyed)
        check([c["name"] for c in columns] == ["region", "id", "name", "score"],
              f"get_columns names: {columns}")
        types = {c["name"]: c["type"] for c in columns}
        check(isinstance(types["id"], sa.BigInteger), f"id type: {types['id']!r}")
        check(isinstance(types["score"], sa.Float), f"score type: {types['score']!r}")
        nullable = {c["name"]: c["nullable"] for c in columns}
        check(nullable == {"region": False, "id": False, "name": False, "score": True},
              f"nullability: {nullable}")

        pk = inspector.get_pk_constraint(keyed)
        check(pk["constrained_columns"] == ["id", "region"], f"primary key: {pk}")
        check(pk["name"] == f"{keyed}_pkey", f"primary key name: {pk}")
        check(inspector.get_indexes(keyed) == [], "no secondary indexes")
        check(inspector.get_foreign_keys(keyed) == [], "no foreign keys")

        table = sa.Table(keyed, sa.MetaData(), autoload_with=engine)
        check([c.name for c in table.primary_key.columns] == ["id", "region"],
              f"reflected key: {table.primary_key}")

        # pandas: write through to_sql, read back three ways.
        df = pd.DataFrame({"a": [1, 2, 3], "b": ["x", "y", None]})
        df.to_sql(frame, engine, if_exists="append", index=False)
        back = pd.read_sql_table(frame, engine).sort_values("a").reset_index(drop=True)
        check(back["a"].tolist() == [1, 2, 3], f"read_sql_table: {back}")
        check(back["b"].tolist()[:2] == ["x", "y"] and pd.isna(back["b"][2]),
              f"read_sql_table NULL: {back}")
        some = pd.read_sql(sa.text(f"SELECT a, b FROM {frame} WHERE a >= :low ORDER BY a"),
                           engine, params={"low": 2})
        check(some["a"].tolist() == [2, 3], f"read_sql with a parameter: {some}")

        # pandas creates a table without a primary key (and an index on its index
        # column); duplicate rows stay, and the hidden key is never shown.
        df2 = pd.DataFrame({"x": [1.5, 2.5, 2.5], "label": ["a", "b", "b"]})
        df2.to_sql(fresh, engine)
        back = pd.read_sql(sa.text(f'SELECT * FROM {fresh} ORDER BY "index"'), engine)
        check(list(back.columns) == ["index", "x", "label"], f"to_sql columns: {back}")
        check(back["label"].tolist() == ["a", "b", "b"], f"to_sql rows: {back}")
        check(inspector.get_pk_constraint(fresh)["constrained_columns"] == [],
              "a pandas table has no primary key")
        df2.to_sql(fresh, engine, if_exists="append")
        df2.to_sql(fresh, engine, if_exists="replace", index=False)
        back = pd.read_sql_table(fresh, engine)
        check(list(back.columns) == ["x", "label"] and len(back) == 3,
              f"to_sql if_exists=replace: {back}")

        # Core statements on the reflected table.
        with engine.begin() as conn:
            conn.execute(table.insert(), [
                {"region": "eu", "id": 1, "name": "one", "score": 1.5},
                {"region": "us", "id": 1, "name": "uno", "score": None},
            ])
            rows = conn.execute(
                sa.select(table.c.name).where(table.c.id == 1).order_by(table.c.region)
            ).scalars().all()
            check(rows == ["one", "uno"], f"select on the reflected table: {rows}")

        # A savepoint around a failing read: rolled back to, and the outer work goes on.
        with engine.connect() as conn:
            with conn.begin():
                try:
                    with conn.begin_nested():
                        conn.execute(sa.text(f"SELECT * FROM no_such_{suffix}"))
                    raise AssertionError("expected an error")
                except sa.exc.ProgrammingError:
                    pass
                count = conn.execute(sa.text(f"SELECT count(*) FROM {keyed}")).scalar()
                check(count == 2, f"count after ROLLBACK TO SAVEPOINT: {count}")
    finally:
        with engine.begin() as conn:
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {keyed}"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {frame}"))
            conn.execute(sa.text(f"DROP TABLE IF EXISTS {fresh}"))
        engine.dispose()
    print("sqlalchemy_smoke.py: OK")


if __name__ == "__main__":
    main()
