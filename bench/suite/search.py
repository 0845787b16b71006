"""Hyperspace search: runs `target/release/cairn-bench search`, which starts `cairn local`
(one tablet server, or three with --cluster), loads objects (id, a, b, c, v) into a table
with subspaces on a, b and c, and from one client times an equality search on a (about
10 objects), a range search on b (about 100) and a count on c (about objects/1000)
through the subspaces, against the same predicates as a full scan of the table and
against PostgreSQL with B-tree indexes on a, b and c (a private server started here);
then a mixed workload of 16 clients (50% search, 50% put) on Cairn and PostgreSQL, and
the put throughput of tables with 0, 1 and 2 subspaces. DuckDB then runs the same
searches (same parameters) on the same objects, written to Parquet and loaded into a
DuckDB table. One JSON line goes to bench/results/search.jsonl."""

import json
import os
import subprocess
import time
from pathlib import Path

from . import common

BENCH_BIN = common.REPO / "target" / "release" / "cairn-bench"
CAIRN_BIN = common.REPO / "target" / "release" / "cairn"

SQL = {
    "equality": "SELECT id, a, b, c, v FROM objs WHERE a = ?",
    "range": "SELECT id, a, b, c, v FROM objs WHERE b >= ? AND b < ? + 100",
    "count": "SELECT count(*) FROM objs WHERE c = ?",
}


def add_arguments(p):
    """Flags of `search`."""
    p.add_argument("--quick", action="store_true",
                   help="100,000 objects and fewer operations (a few minutes)")
    p.add_argument("--objects", type=int, default=10_000_000,
                   help="objects in the searched table (default 10 million)")
    p.add_argument("--cluster", action="store_true",
                   help="3 tablet servers and 3 replicas instead of 1 and 1")
    p.add_argument("--work-dir", help="where the servers and data live (default: /tmp)")
    p.add_argument("--no-postgres", action="store_true", help="leave PostgreSQL out")
    p.add_argument("--no-duckdb", action="store_true", help="leave DuckDB out")


def percentiles(lat_s, rows):
    """p50/p99 in µs, operations per second and rows per operation of a serial run."""
    lat = sorted(lat_s)
    n = max(len(lat), 1)
    pick = lambda p: lat[min(int(n * p), n - 1)] * 1e6 if lat else 0.0  # noqa: E731
    return {"p50_us": pick(0.5), "p99_us": pick(0.99),
            "ops": len(lat) / max(sum(lat), 1e-9), "rows": rows / n}


def duckdb_runs(parquet, single, progress):
    """Loads the Parquet objects into DuckDB and times each kind's searches."""
    import duckdb
    con = duckdb.connect()
    t0 = time.perf_counter()
    con.execute(f"CREATE TABLE objs AS SELECT * FROM read_parquet('{parquet}')")
    load_s = time.perf_counter() - t0
    out = {"load_s": load_s}
    for kind, sql in SQL.items():
        params = single[kind]["params"][:200]
        progress.update("duckdb", f"{kind}: {len(params)} searches")
        lat, rows = [], 0
        for x in params:
            arg = f"c{x:04d}" if kind == "count" else x
            args = [arg, arg] if kind == "range" else [arg]
            s = time.perf_counter()
            res = con.execute(sql, args).fetchall()
            lat.append(time.perf_counter() - s)
            rows += res[0][0] if kind == "count" else len(res)
        out[kind] = percentiles(lat, rows)
    con.close()
    return out


def run(args):
    """Runs cairn-bench search (and DuckDB), appends the JSON line; fails if it fails."""
    objects = 100_000 if args.quick else args.objects
    work = Path(args.work_dir or "/tmp") / "cairn-bench-search"
    work.mkdir(parents=True, exist_ok=True)
    # The postgres user must reach its data directory: a world-readable folder.
    os.chmod(work, 0o755)
    out = work / "result.json"
    parquet = work / "objects.parquet"
    cmd = [str(BENCH_BIN), "search", "--cairn", str(CAIRN_BIN), "--objects", str(objects),
           "--work-dir", str(work), "--out", str(out)]
    if args.quick:
        cmd += ["--searches", "300", "--mixed-ops", "8000", "--puts", "8000"]
    if args.cluster:
        cmd += ["--tservers", "3", "--replicas", "3"]
    if not args.no_duckdb:
        cmd += ["--parquet-out", str(parquet)]
    progress = common.Progress("search")
    pg = None
    versions = {"cairn": common.git_revision()}
    try:
        if not args.no_postgres:
            progress.update("postgres", "starting PostgreSQL")
            pg = common.PostgresServer(work / "pg").start(fresh=True)
            cmd += ["--pg-url", pg.dsn]
            versions["postgres"] = pg.version()
        progress.update("cairn", " ".join(cmd[1:]))
        subprocess.run(cmd, cwd=common.REPO, check=True)
    finally:
        if pg:
            pg.stop()
            pg.remove_data()
    result = json.loads(out.read_text())
    if not args.no_duckdb:
        import duckdb
        versions["duckdb"] = duckdb.__version__
        result["duckdb"] = duckdb_runs(parquet, result["single"], progress)
        parquet.unlink(missing_ok=True)
    for kind in result["single"].values():
        kind.pop("params", None)
    record = common.run_metadata(versions)
    record.update(result)
    common.append_jsonl(common.RESULTS / "search.jsonl", record)
    progress.done()
    print(summary(record))


def summary(x):
    """The run's figures as a few lines of text."""
    lines = [f"search: {x['objects']:,} objects, {x['tservers']} tablet server(s), "
             f"replicas {x['replicas']}"]
    for kind, e in x["single"].items():
        sub, scan = e["subspace"]["p50_us"], e["full_scan"]["p50_us"]
        line = (f"  {kind:<8} subspace p50 {sub:,.0f} µs, full scan {scan:,.0f} µs "
                f"({scan / max(sub, 1e-9):.1f}x)")
        if "postgres" in e:
            pgv = e["postgres"]["p50_us"]
            line += f", PostgreSQL {pgv:,.0f} µs (Cairn takes {sub / max(pgv, 1e-9):.1f}x)"
        if "duckdb" in x:
            line += f", DuckDB {x['duckdb'][kind]['p50_us']:,.0f} µs"
        lines.append(line)
    pc = x["put_cost"]
    base = pc["0"]["ops"]
    lines.append("  puts/s with 0, 1, 2 subspaces: " + ", ".join(
        f"{pc[n]['ops']:,.0f} ({pc[n]['ops'] / base:.2f}x)" for n in ("0", "1", "2")))
    return "\n".join(lines)
