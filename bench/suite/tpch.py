"""TPC-H: the 22 queries on Cairn and its peers over the same generated data.

Systems (the names used in the JSON lines and the report):

- `cairn-local`: `cairn local`, 1 tablet server, replicas 1, loaded with COPY FROM
  Parquet over pgwire; queries over pgwire (psycopg).
- `cairn-cluster`: 1 `cairn master` + 3 `cairn tserver` processes, replicas 3; same.
- `duckdb-parquet`: DuckDB views over read_parquet (also the reference answers).
- `duckdb-native`: DuckDB tables (CREATE TABLE AS from the Parquet files, in a
  database file).
- `datafusion-parquet`: DataFusion (Python) with register_parquet.
- `spark`: PySpark local[*], temp views over the Parquet files, driver memory 4g.
- `postgres`: a private PostgreSQL, tables with Cairn's primary keys, COPY from CSV.

Each system runs its queries in a worker process of its own (a new process group) so
that a query past --timeout can be cancelled, or the worker killed, and the run go on.
Per query: one warm-up (whose rows are checked against the reference), then --runs
timed runs; a time is the wall time of executing and fetching all rows.
"""

import datetime
import multiprocessing
import os
import platform
import re
import signal
import statistics
import subprocess
import threading
import time
from decimal import Decimal
from pathlib import Path

from . import common

TABLES = ["nation", "region", "part", "supplier", "partsupp", "customer", "orders",
          "lineitem"]
SYSTEMS = ["cairn-local", "cairn-cluster", "duckdb-parquet", "duckdb-native",
           "datafusion-parquet", "spark", "postgres"]
QUERIES_DIR = common.REPO / "bench" / "tpch" / "queries"
SCHEMA = common.REPO / "bench" / "tpch" / "schema.sql"
KILL_GRACE_S = 10  # after --timeout, how long a worker may take to answer a cancel


def add_arguments(p):
    """Flags of `tpch`."""
    p.add_argument("--sf", type=float, help="scale factor (default 1; --quick: 0.01)")
    p.add_argument("--quick", action="store_true",
                   help="SF 0.01, 1 run, timeout 60 s unless given: a few minutes in all")
    p.add_argument("--runs", type=int, help="timed runs per query after one warm-up; the "
                   "median is kept (default 3; --quick: 1)")
    p.add_argument("--timeout", type=float, help="seconds one query may run before it is "
                   "cancelled (default 300; --quick: 60)")
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma-separated subset of: " + ", ".join(SYSTEMS))
    p.add_argument("--queries", default="",
                   help="comma-separated query numbers, e.g. 1,6,18 (default all 22)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/cairn-bench"),
                   help="data files, server data and logs (default /tmp/cairn-bench)")


# ---- answers -------------------------------------------------------------------------

def normalize(rows):
    """Rows as tuples of comparable values: numbers → float, dates → ISO strings,
    strings stripped."""
    def value(v):
        if isinstance(v, (int, float, Decimal)) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, (datetime.date, datetime.datetime)):
            return v.isoformat()
        return v.strip() if isinstance(v, str) else v
    return [tuple(value(v) for v in r) for r in rows]


def _sort_key(row):
    return tuple(f"{v:.6g}" if isinstance(v, float) else repr(v) for v in row)


def _same_value(a, b):
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= max(0.01, 1e-6 * max(abs(a), abs(b)))
    return a == b


def compare(reference, rows):
    """("match", None) or ("mismatch", a short description of the first differences);
    rows are compared as multisets."""
    if len(rows) != len(reference):
        return "mismatch", f"{len(rows)} rows, reference {len(reference)}"
    diffs = [f"got {g} expected {r}"
             for g, r in zip(sorted(rows, key=_sort_key), sorted(reference, key=_sort_key))
             if len(g) != len(r) or not all(map(_same_value, g, r))]
    if not diffs:
        return "match", None
    return "mismatch", f"{len(diffs)} rows differ, e.g. " + "; ".join(diffs[:3])[:600]


# ---- executors (they live in the worker process) -------------------------------------

class PgExecutor:
    """Queries over the PostgreSQL wire protocol (Cairn and PostgreSQL)."""

    def __init__(self, dsn):
        import psycopg
        self.conn = psycopg.connect(dsn, autocommit=True)

    def run(self, sql):
        """Executes `sql` and fetches every row."""
        return self.conn.execute(sql).fetchall()

    def cancel(self):
        """Sends a cancel request for the running query."""
        self.conn.cancel_safe()


class DuckDBExecutor:
    """DuckDB on a database file (read-only) or on views over Parquet files."""

    def __init__(self, db_path, parquet_dir):
        import duckdb
        self.con = duckdb.connect(db_path or ":memory:", read_only=bool(db_path))
        for t in TABLES if parquet_dir else []:
            self.con.execute(f"CREATE VIEW {t} AS SELECT * FROM "
                             f"read_parquet('{parquet_dir}/{t}.parquet')")

    def run(self, sql):
        """Executes `sql` and fetches every row."""
        return self.con.execute(sql).fetchall()

    def cancel(self):
        """Interrupts the running query."""
        self.con.interrupt()


class DataFusionExecutor:
    """DataFusion's Python bindings over the Parquet files (no cancel: killed)."""

    def __init__(self, parquet_dir):
        import datafusion
        self.ctx = datafusion.SessionContext()
        for t in TABLES:
            self.ctx.register_parquet(t, f"{parquet_dir}/{t}.parquet")

    def run(self, sql):
        """Executes `sql` and collects every batch into rows."""
        rows = []
        for b in self.ctx.sql(sql).collect():
            rows.extend(zip(*(c.to_pylist() for c in b.columns)))
        return rows

    def cancel(self):
        """DataFusion has no cancel; the worker is killed after the grace period."""


class SparkExecutor:
    """PySpark local[*] with temp views over the Parquet files."""

    def __init__(self, parquet_dir):
        from pyspark.sql import SparkSession
        self.spark = (SparkSession.builder.master("local[*]").appName("cairn-bench")
                      .config("spark.driver.memory", "4g")
                      .config("spark.ui.enabled", "false").getOrCreate())
        self.spark.sparkContext.setLogLevel("ERROR")
        for t in TABLES:
            self.spark.read.parquet(f"{parquet_dir}/{t}.parquet").createOrReplaceTempView(t)

    def run(self, sql):
        """Executes `sql` and collects every row."""
        return [tuple(r) for r in self.spark.sql(sql).collect()]

    def cancel(self):
        """Cancels every running Spark job."""
        self.spark.sparkContext.cancelAllJobs()


EXECUTORS = {"pg": PgExecutor, "duckdb": DuckDBExecutor, "datafusion": DataFusionExecutor,
             "spark": SparkExecutor}


def _worker_main(conn, kind, args, log):
    """Worker loop: receives (sql, timeout, want_rows), answers (status, seconds,
    payload) where payload is the normalised rows, the row count or an error message.
    Its stdout and stderr (Spark's JVM chatter included) go to the file `log`."""
    os.setpgid(0, 0)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    try:
        ex = EXECUTORS[kind](*args)
    except Exception as e:  # reported to the parent, which records it per query
        conn.send(("error", None, f"{type(e).__name__}: {e}"))
        return
    conn.send(("ready", None, None))
    while (msg := conn.recv()) is not None:
        sql, timeout, want_rows = msg
        timer = threading.Timer(timeout, ex.cancel)
        timer.start()
        t0 = time.perf_counter()
        try:
            rows = ex.run(sql)
            secs = time.perf_counter() - t0
            if secs > timeout:
                conn.send(("timeout", None, f"took {secs:.1f} s, could not be cancelled"))
            else:
                conn.send(("ok", secs, normalize(rows) if want_rows else len(rows)))
        except Exception as e:  # every failure is recorded, never hidden
            # Past the timeout the failure is the cancel the timer sent (its thread may
            # still be waiting for the server to confirm it).
            status = "timeout" if time.perf_counter() - t0 >= timeout else "error"
            conn.send((status, None, f"{type(e).__name__}: {' '.join(str(e).split())[:500]}"))
        finally:
            timer.cancel()


class Worker:
    """Parent side of a worker process running one executor."""

    def __init__(self, kind, args, log):
        self.kind, self.args, self.log = kind, args, str(log)
        self.proc = self.conn = None
        self.start_error = None

    def start(self):
        """Starts the process and waits until its executor is ready (or failed)."""
        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(child, self.kind, self.args, self.log))
        self.proc.start()
        common.track(self)
        try:
            status, _, msg = (self.conn.recv() if self.conn.poll(600)
                              else ("error", None, "not ready after 600 s"))
        except EOFError:
            status, msg = "error", f"worker died (exit code {self.proc.exitcode})"
        self.start_error = None if status == "ready" else msg

    def query(self, sql, timeout, want_rows):
        """(status, seconds, payload) of one execution. After a timeout (the worker
        cancels at `timeout`; no answer `KILL_GRACE_S` later: killed) or the worker's
        death it is restarted."""
        if self.start_error:
            return "error", None, f"worker did not start: {self.start_error}"
        self.conn.send((sql, timeout, want_rows))
        died = False
        try:
            if self.conn.poll(timeout + KILL_GRACE_S):
                answer = self.conn.recv()
            else:
                answer = ("timeout", None, f"killed after {timeout + KILL_GRACE_S:.0f} s")
        except EOFError:
            self.proc.join(5)
            died, answer = True, ("error", None, f"worker died (exit code {self.proc.exitcode})")
        if answer[0] == "timeout" or died:
            self.stop(kill=True)
            self.start()
        return answer

    def stop(self, kill=False):
        """Ends the worker (asking it first unless `kill`) and everything in its process
        group (Spark's JVM too)."""
        if self.proc:
            if not kill:
                try:
                    self.conn.send(None)
                    self.proc.join(10)
                except (OSError, ValueError):
                    pass
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self.proc.join()
            self.proc = None
        common.untrack(self)


# ---- data and loading (in the parent) ------------------------------------------------

def generate(sf, work_dir, progress):
    """Directory of the Parquet files at `sf`, generated with tpchgen-cli if missing."""
    out = work_dir / f"tpch-sf{sf:g}"
    if not all((out / f"{t}.parquet").exists() for t in TABLES):
        progress.update("tpchgen-cli", f"generating SF {sf:g}")
        subprocess.run([common.VENV_BIN / "tpchgen-cli", "parquet", "-s", f"{sf:g}",
                        "--output-dir", out], check=True, capture_output=True)
    return out


def schema_statements(strip_partitioning=False):
    """CREATE TABLE statements of bench/tpch/schema.sql (without Cairn's PARTITION BY
    clause for other databases)."""
    text = "\n".join(line for line in SCHEMA.read_text().splitlines()
                     if not line.startswith("--"))
    stmts = [s.strip() for s in text.split(";") if s.strip()]
    if strip_partitioning:
        stmts = [re.sub(r"\s*PARTITION BY HASH \([^)]*\) PARTITIONS \d+", "", s) for s in stmts]
    return stmts


def load_pg(dsn, statements):
    """Runs statements over pgwire in autocommit mode; returns the seconds they took."""
    import psycopg
    with psycopg.connect(dsn, autocommit=True) as conn:
        t0 = time.perf_counter()
        for s in statements:
            conn.execute(s)
        return time.perf_counter() - t0


def setup_system(name, data, work_dir, progress):
    """Starts and loads system `name`: (server or None, executor kind, executor args,
    load record fields or None)."""
    if name.startswith("cairn-"):
        server = common.start_server(name, work_dir)
        load_pg(server.dsn, schema_statements())
        load_s = load_pg(server.dsn, [f"COPY {t} FROM '{data}/{t}.parquet'" for t in TABLES])
        progress.update(name, "waiting for flushes and compactions to settle")
        return server, "pg", (server.dsn,), {"load_s": load_s,
                                             "settle_s": common.settle(server.pids)}
    if name == "postgres":
        csv = data.with_name(data.name + "-csv")
        csv.mkdir(exist_ok=True)
        import duckdb
        for t in TABLES:
            if not (csv / f"{t}.csv").exists():
                duckdb.sql(f"COPY (SELECT * FROM read_parquet('{data}/{t}.parquet')) "
                           f"TO '{csv}/{t}.csv' (HEADER false)")
        server = common.start_server(name, work_dir)
        load_pg(server.dsn, schema_statements(strip_partitioning=True))
        load_s = load_pg(server.dsn, [f"COPY {t} FROM '{csv}/{t}.csv' WITH (FORMAT csv)"
                                      for t in TABLES] + ["ANALYZE"])
        return server, "pg", (server.dsn,), {"load_s": load_s}
    if name == "duckdb-native":
        import duckdb
        db = work_dir / f"duckdb-native-{data.name}.duckdb"
        db.unlink(missing_ok=True)
        with duckdb.connect(str(db)) as con:
            t0 = time.perf_counter()
            for t in TABLES:
                con.execute(f"CREATE TABLE {t} AS SELECT * FROM read_parquet('{data}/{t}.parquet')")
            load_s = time.perf_counter() - t0
        return None, "duckdb", (str(db), None), {"load_s": load_s}
    kind = {"duckdb-parquet": "duckdb", "datafusion-parquet": "datafusion", "spark": "spark"}
    args = (None, str(data)) if name == "duckdb-parquet" else (str(data),)
    return None, kind[name], args, None


def versions(systems):
    """Version strings of the systems in `systems` (and the tools every run uses)."""
    import duckdb
    v = {"python": platform.python_version(), "duckdb": duckdb.__version__,
         "tpchgen-cli": common.command_version([common.VENV_BIN / "tpchgen-cli", "--version"])}
    if any(s.startswith("cairn") for s in systems):
        v["cairn"] = common.command_version([common.CAIRN_BIN, "--version"])
    if any(s.startswith("cairn") or s == "postgres" for s in systems):
        import psycopg
        v["psycopg"] = psycopg.__version__
    if "datafusion-parquet" in systems:
        import datafusion
        v["datafusion"] = datafusion.__version__
    if "spark" in systems:
        import pyspark
        v["pyspark"] = pyspark.__version__
        v["java"] = common.command_version(["sh", "-c", "java -version 2>&1"])
    if "postgres" in systems:
        v["postgres"] = common.PostgresServer(Path("/tmp")).version()
    return v


def query_sql(n, sf):
    """Text of query `n`; q11's fraction becomes 0.0001 / SF away from SF 1."""
    sql = (QUERIES_DIR / f"q{n}.sql").read_text().strip().rstrip(";")
    return sql.replace("0.0001", f"{0.0001 / sf:.10g}") if n == 11 and sf != 1 else sql


def run(args):
    """Runs the TPC-H suite and appends its JSON lines to bench/results/tpch.jsonl."""
    for key, default, quick in (("sf", 1.0, 0.01), ("runs", 3, 1), ("timeout", 300, 60)):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else default)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    unknown = set(systems) - set(SYSTEMS)
    if unknown:
        raise SystemExit(f"unknown systems: {', '.join(sorted(unknown))}")
    queries = [int(q) for q in args.queries.split(",") if q.strip()] or list(range(1, 23))
    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    progress = common.Progress("tpch")
    meta = common.run_metadata(versions(systems))
    out = common.RESULTS / "tpch.jsonl"
    data = generate(args.sf, work_dir, progress)
    sqls = {n: query_sql(n, args.sf) for n in queries}

    progress.update("duckdb-parquet", "reference answers")
    reference = {}
    ref = DuckDBExecutor(None, data)
    for n, sql in sqls.items():
        try:
            reference[n] = normalize(ref.run(sql))
        except Exception as e:  # noqa: BLE001 - the query is then not checked
            progress.log(f"reference q{n} failed, its answers are not checked: {e}")
    del ref

    for name in systems:
        base = {"suite": "tpch", **meta, "sf": args.sf, "system": name}
        progress.update(name, "start and load")
        try:
            server, kind, ex_args, load = setup_system(name, data, work_dir, progress)
        except Exception as e:  # noqa: BLE001 - recorded, then the next system
            msg = f"{type(e).__name__}: {e}"
            progress.log(f"{name}: setup failed: {msg}")
            common.append_jsonl(out, {**base, "query": "load", "load_s": None,
                                      "status": "error", "error": msg})
            common.stop_all()
            continue
        if load:
            common.append_jsonl(out, {**base, "query": "load", **load, "status": "ok",
                                      "error": None})
            settled = f", settled after {load['settle_s']:.0f} s" if "settle_s" in load else ""
            progress.log(f"{name}: loaded in {load['load_s']:.1f} s{settled}")
        worker = Worker(kind, ex_args, work_dir / f"worker-{name}.log")
        worker.start()
        summary = {"ok": 0, "match": 0, "total_s": 0.0}
        for n, sql in sqls.items():
            rec = run_query(worker, name, n, sql, args, reference.get(n), progress)
            common.append_jsonl(out, {**base, **rec})
            if rec["status"] == "timeout" and server:
                # A cancelled query may go on running in the server for a while.
                progress.update(name, f"q{n} timed out; waiting for the server to go idle")
                common.settle(server.pids, max_s=args.timeout)
            summary["ok"] += rec["status"] == "ok"
            summary["match"] += rec["answer"] == "match"
            summary["total_s"] += rec["median_s"] or 0.0
        worker.stop()
        if server:
            server.stop()
            # One system's data at a time: a 3-replica cluster at SF 1 alone takes ~6 GB.
            server.remove_data()
        progress.log(f"{name}: {summary['ok']}/{len(sqls)} ok, {summary['match']} answers "
                     f"match, sum of medians {summary['total_s']:.2f} s")
    progress.done()


def run_query(worker, system, n, sql, args, reference, progress):
    """One query on one system: warm-up + timed runs; the JSON line's query fields."""
    q = f"q{n}"
    rec = {"query": q, "runs_s": [], "median_s": None, "status": "ok", "error": None,
           "answer": "n/a", "rows": None}
    progress.update(system, q, 0, args.runs)
    status, _, payload = worker.query(sql, args.timeout, want_rows=True)
    if status == "ok":
        rec["rows"] = len(payload)
        if reference is not None:
            rec["answer"], diff = compare(reference, payload)
            if diff:
                rec["diff"] = diff
                progress.log(f"{system} {q}: answer differs from duckdb-parquet: {diff}")
        for i in range(1, args.runs + 1):
            progress.update(system, q, i, args.runs)
            status, secs, payload = worker.query(sql, args.timeout, want_rows=False)
            if status != "ok":
                break
            rec["runs_s"].append(secs)
    if status != "ok":
        rec["status"], rec["error"] = status, payload
        progress.log(f"{system} {q}: {status}: {payload}")
    elif rec["runs_s"]:
        rec["median_s"] = statistics.median(rec["runs_s"])
    return rec
