"""Scale-out: the work of each TPC-H query on clusters of 1, 2 and 4 tablet servers.

This machine has 2 cores, so wall time cannot show a cluster speeding a query up.
The work can be measured instead: how much CPU each process spends on a query, and
whether the busiest one (the critical path) shrinks as servers are added.

Per cluster size N (--servers): one `cairn master` (the SQL front end, which
coordinates every query) and N `cairn tserver` processes, each with a fresh data
directory, replicas 1 (each tablet lives on one server), every table hash-partitioned
into --partitions tablets so that each server holds some of every table. The tables
are loaded with `COPY … FROM` the Parquet files, then the suite waits for background
flushes and compactions to settle and measures each process's idle CPU rate for
--idle-window seconds. Per query:

- one warm-up, whose rows are checked against DuckDB's on the same files;
- one `EXPLAIN ANALYZE`, for the bytes shuffled between servers (the sum of the
  network boundaries' `bytes_transferred`; 0 when the query did not run distributed)
  and whether it ran distributed;
- --runs measured runs. Before and after each, the CPU time (user + system) of every
  process is read from /proc/<pid>/stat, and the bytes it wrote (to sockets and
  files) from /proc/<pid>/io. A process's CPU for the query is the mean over the runs
  of its CPU delta less its idle rate × the run's wall time (Raft and heartbeat
  background), at least 0.

Derived (in the report):
- total CPU = the sum over the processes;
- critical path = the largest CPU of one process (master included: it runs each
  query's head stage);
- scale-out efficiency at N = total CPU at N = 1 / (N × critical path at N): 1 when the
  one-server work is split evenly over N servers with nothing added, lower when the
  split is uneven, the coordinator does much of the work, or distribution adds work.

Target (issue #18): efficiency ≥ 0.75 at N = 4 (geomean over the queries), no query
below 0.5. One JSON line per (N, query) goes to bench/results/scaleout.jsonl.
"""

import re
import statistics
import time
from pathlib import Path

from . import common, tpch

# Ports apart from the other suites' servers.
PG_PORT, MASTER_PORT, TSERVER_PORT = 5437, 7451, 7460

UNITS = {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30, "TB": 1 << 40}


def add_arguments(p):
    """Flags of `scaleout`."""
    p.add_argument("--sf", type=float, help="TPC-H scale factor (default 1; --quick: 0.01)")
    p.add_argument("--quick", action="store_true",
                   help="SF 0.01, 1 run, servers 1,2: a check of the suite in a few minutes")
    p.add_argument("--servers", help="comma-separated cluster sizes (default 1,2,4; "
                   "--quick: 1,2); the first is the baseline of the efficiency")
    p.add_argument("--partitions", type=int, default=8,
                   help="hash partitions (tablets) per table (default 8)")
    p.add_argument("--runs", type=int, help="measured runs per query after one warm-up and "
                   "one EXPLAIN ANALYZE (default 3; --quick: 1)")
    p.add_argument("--queries", default="",
                   help="comma-separated query numbers, e.g. 1,6,18 (default all 22)")
    p.add_argument("--idle-window", type=float, default=5.0,
                   help="seconds over which each process's idle CPU rate is measured")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/cairn-bench"),
                   help="data files, server data and logs (default /tmp/cairn-bench)")


def bytes_written(pid):
    """Bytes process `pid` has written (`wchar` of /proc/<pid>/io: sockets and files);
    0 if unknown."""
    try:
        for line in Path(f"/proc/{pid}/io").read_text().splitlines():
            if line.startswith("wchar:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return 0


def shuffled_bytes(explain_text):
    """Sum of the `bytes_transferred` metrics in an EXPLAIN ANALYZE text."""
    total = 0.0
    for value, unit in re.findall(r"bytes_transferred=([\d.]+) ?(B|KB|MB|GB|TB)\b",
                                  explain_text):
        total += float(value) * UNITS[unit]
    return int(total)


def schema_statements(partitions):
    """The TPC-H tables, each hash-partitioned into `partitions` tablets."""
    return [re.sub(r"PARTITIONS \d+", f"PARTITIONS {partitions}", s)
            for s in tpch.schema_statements()]


def idle_rates(pids, window):
    """CPU seconds per second each process uses while no query runs."""
    before = [common.cpu_seconds(p) for p in pids]
    time.sleep(window)
    return [max(0.0, (common.cpu_seconds(p) - b) / window) for p, b in zip(pids, before)]


def measure(conn, sql, pids, idle):
    """Runs `sql` once: (wall seconds, CPU per process net of idle, bytes written per
    process)."""
    cpu0 = [common.cpu_seconds(p) for p in pids]
    io0 = [bytes_written(p) for p in pids]
    t0 = time.perf_counter()
    conn.execute(sql).fetchall()
    wall = time.perf_counter() - t0
    cpu = [max(0.0, common.cpu_seconds(p) - c - r * wall) for p, c, r in zip(pids, cpu0, idle)]
    io = [bytes_written(p) - b for p, b in zip(pids, io0)]
    return wall, cpu, io


def run_cluster(n, args, data, sqls, reference, work_dir, progress, base, out):
    """Starts a cluster of `n` tablet servers, loads it, measures every query; returns
    {query: total CPU} for the summary."""
    import psycopg
    system = f"cairn-cluster-{n}"
    progress.update(system, "start")
    server = common.CairnCluster(work_dir, pg_port=PG_PORT, tservers=n, replicas=1,
                                 master_port=MASTER_PORT, tserver_port=TSERVER_PORT).start()
    names = ["master"] + [f"tserver{i}" for i in range(n)]
    totals = {}
    try:
        progress.update(system, "load")
        tpch.load_pg(server.dsn, schema_statements(args.partitions))
        load_s = tpch.load_pg(server.dsn, [f"COPY {t} FROM '{data}/{t}.parquet'"
                                           for t in tpch.TABLES])
        progress.update(system, "waiting for flushes and compactions to settle")
        settle_s = common.settle(server.pids)
        idle = idle_rates(server.pids, args.idle_window)
        common.append_jsonl(out, {**base, "servers": n, "query": "load", "load_s": load_s,
                                  "settle_s": settle_s, "idle_cpu": dict(zip(names, idle)),
                                  "status": "ok", "error": None})
        progress.log(f"{system}: loaded in {load_s:.1f} s, settled after {settle_s:.0f} s")
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            for q, sql in sqls.items():
                rec = {**base, "servers": n, "query": f"q{q}", "status": "ok",
                       "error": None, "answer": "n/a"}
                try:
                    progress.update(system, f"q{q} warm-up")
                    rows = conn.execute(sql).fetchall()
                    if q in reference:
                        rec["answer"], diff = tpch.compare(reference[q], tpch.normalize(rows))
                        if diff:
                            rec["diff"] = diff
                            progress.log(f"{system} q{q}: answer differs: {diff}")
                    progress.update(system, f"q{q} EXPLAIN ANALYZE")
                    text = "\n".join(str(r[-1]) for r in
                                     conn.execute(f"EXPLAIN ANALYZE {sql}").fetchall())
                    rec["shuffled_bytes"] = shuffled_bytes(text)
                    rec["distributed"] = "NetworkCoalesceExec" in text or \
                        "NetworkShuffleExec" in text or "DistributedExec" in text
                    walls, cpus, ios = [], [], []
                    for i in range(args.runs):
                        progress.update(system, f"q{q}", i + 1, args.runs)
                        wall, cpu, io = measure(conn, sql, server.pids, idle)
                        walls.append(wall)
                        cpus.append(cpu)
                        ios.append(io)
                    cpu = [statistics.mean(c[j] for c in cpus) for j in range(len(names))]
                    rec["wall_s"] = statistics.median(walls)
                    rec["cpu_s"] = dict(zip(names, cpu))
                    rec["written_bytes"] = dict(zip(names, (int(statistics.mean(
                        x[j] for x in ios)) for j in range(len(names)))))
                    rec["total_cpu_s"] = sum(cpu)
                    rec["max_cpu_s"] = max(cpu)
                    rec["critical"] = names[cpu.index(max(cpu))]
                    totals[q] = rec["total_cpu_s"]
                except psycopg.Error as e:
                    rec["status"], rec["error"] = "error", f"{type(e).__name__}: {e}"
                    progress.log(f"{system} q{q}: {rec['error']}")
                common.append_jsonl(out, rec)
    finally:
        server.stop()
        server.remove_data()
    return totals


def run(args):
    """Runs the scale-out suite and appends its JSON lines to bench/results/scaleout.jsonl."""
    for key, default, quick in (("sf", 1.0, 0.01), ("runs", 3, 1), ("servers", "1,2,4", "1,2")):
        if getattr(args, key) is None:
            setattr(args, key, quick if args.quick else default)
    sizes = [int(s) for s in str(args.servers).split(",") if s.strip()]
    if not sizes or min(sizes) < 1:
        raise SystemExit("--servers needs cluster sizes of at least 1, e.g. 1,2,4")
    if args.partitions < 2:
        raise SystemExit("--partitions needs at least 2 (a hash level has 2 buckets or more)")
    queries = [int(q) for q in args.queries.split(",") if q.strip()] or list(range(1, 23))
    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    progress = common.Progress("scaleout")
    meta = common.run_metadata(tpch.versions(["cairn-cluster"]))
    out = common.RESULTS / "scaleout.jsonl"
    data = tpch.generate(args.sf, work_dir, progress)
    sqls = {n: tpch.query_sql(n, args.sf) for n in queries}
    progress.update("duckdb-parquet", "reference answers")
    reference = {}
    ref = tpch.DuckDBExecutor(None, data)
    for n, sql in sqls.items():
        try:
            reference[n] = tpch.normalize(ref.run(sql))
        except Exception as e:  # noqa: BLE001 - the query is then not checked
            progress.log(f"reference q{n} failed, its answers are not checked: {e}")
    del ref
    base = {"suite": "scaleout", **meta, "sf": args.sf, "partitions": args.partitions,
            "runs": args.runs, "baseline_servers": sizes[0]}
    first = None
    for n in sizes:
        try:
            totals = run_cluster(n, args, data, sqls, reference, work_dir, progress, base, out)
        except Exception as e:  # noqa: BLE001 - recorded, then the next size
            msg = f"{type(e).__name__}: {e}"
            progress.log(f"cairn-cluster-{n}: failed: {msg}")
            common.append_jsonl(out, {**base, "servers": n, "query": "load",
                                      "status": "error", "error": msg})
            common.stop_all()
            continue
        if first is None:
            first = totals
        elif totals:
            progress.log(f"{n} servers: total CPU {sum(totals.values()):.1f} s against "
                         f"{sum(first.values()):.1f} s on {sizes[0]}")
    progress.done()
