"""The cost of TLS and authentication: TPC-H and YCSB workload C on Cairn with security
off and on, on the same data in the same run.

Deployments (each measured off, then on, each time on a fresh server):

- `cairn-local` / `cairn-local-tls`: `cairn local`, 1 tablet server, replicas 1. In one
  process the SQL engine calls its tablet servers without the network, so "on" costs
  the client's TLS session and the SCRAM login.
- `cairn-cluster` / `cairn-cluster-tls`: 1 `cairn master` (SQL) + 3 `cairn tserver`
  processes, replicas 3. "On" also puts every RPC between them (scans, writes, Raft
  replication, heartbeats) on mutual TLS, and every read and write carries a signed
  login token that the tablet server verifies.

"On" means: a CA and node certificate made with `cairn cert`, `--tls-*` on every
process, `--pg-auth scram-sha-256` and clients logging in as the superuser `cairn` with
a password over `sslmode=verify-full`. "Off" is the default loopback setup (no TLS,
`trust`).

Per deployment and setting: TPC-H at --sf (load with COPY FROM Parquet, then the 22
queries: one warm-up whose answers are checked against DuckDB's, then the median of
--runs timed runs), then YCSB (load --records, then --operations of workload C, 100%
reads by key, with --threads go-ycsb threads). One JSON line per measurement goes to
bench/results/tls-cost.jsonl; the report gives on / off per deployment.
"""

import statistics
from pathlib import Path

from . import common, tpch, ycsb

DEPLOYMENTS = ["cairn-local", "cairn-cluster"]


def add_arguments(p):
    """Flags of `tls-cost`."""
    p.add_argument("--quick", action="store_true",
                   help="TPC-H SF 0.01 with 1 run, YCSB 10,000 records and 5,000 operations")
    p.add_argument("--sf", type=float, help="TPC-H scale factor (default 1; --quick: 0.01)")
    p.add_argument("--runs", type=int, help="timed runs per TPC-H query (default 3)")
    p.add_argument("--timeout", type=float, default=300,
                   help="seconds one query, YCSB load or workload may run (default 300)")
    p.add_argument("--records", type=int, help="YCSB records (default 100,000)")
    p.add_argument("--operations", type=int, help="YCSB workload C operations (default 100,000)")
    p.add_argument("--threads", type=int, default=16, help="YCSB client threads (default 16)")
    p.add_argument("--deployments", default=",".join(DEPLOYMENTS),
                   help=f"comma-separated subset of {','.join(DEPLOYMENTS)} (default both)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/cairn-bench"),
                   help="data files, server data and logs (default /tmp/cairn-bench)")


def run_tpch(system, data, sqls, reference, args, work_dir, progress, base, out):
    """Loads and runs the TPC-H queries on a fresh `system`; appends one line per
    query (and one for the load); returns the sum of the query medians, or None if a
    query failed."""
    server, kind, ex_args, load = tpch.setup_system(system, data, work_dir, progress)
    common.append_jsonl(out, {**base, "bench": "tpch", "query": "load", **load,
                              "status": "ok", "error": None})
    worker = tpch.Worker(kind, ex_args, work_dir / f"worker-{system}.log")
    worker.start()
    total, failed = 0.0, False
    try:
        for n, sql in sqls.items():
            rec = tpch.run_query(worker, system, n, sql, args, reference.get(n), progress)
            common.append_jsonl(out, {**base, "bench": "tpch", **rec})
            failed |= rec["status"] != "ok" or rec["answer"] == "mismatch"
            total += rec["median_s"] or 0.0
    finally:
        worker.stop()
        server.stop()
        server.remove_data()
    progress.log(f"tls-cost {system}: TPC-H load {load['load_s']:.1f} s, sum of medians "
                 f"{total:.2f} s" + (" (some queries failed)" if failed else ""))
    return None if failed else total


def run_ycsb_c(system, args, work_dir, progress, base, out):
    """Loads YCSB records into a fresh `system` and runs workload C; appends a line for
    the load and one for the run."""
    server = common.start_server(system, work_dir)
    log_path = work_dir / f"go-ycsb-{system}.log"
    log_path.unlink(missing_ok=True)
    props = {"pg.host": "127.0.0.1", "pg.port": server.port, "pg.user": server.user,
             "pg.db": server.db, "recordcount": args.records,
             "operationcount": args.operations, "threadcount": args.threads}
    if getattr(server, "secure", False):
        # lib/pq reads sslrootcert from the environment; go-ycsb passes sslmode.
        props.update({"pg.password": server.password, "pg.sslmode": "verify-full"})
    try:
        for phase in ("load", "run"):
            p = dict(props, dropdata="true") if phase == "load" else props
            status, error, runtime, ops = ycsb.run_ycsb(
                phase, "c", p, args.timeout, progress, system, log_path,
                env={"PGSSLROOTCERT": str(server.certs / "ca.pem")}
                if getattr(server, "secure", False) else None)
            n = args.records if phase == "load" else args.operations
            line = {**base, "bench": "ycsb", "workload": "load" if phase == "load" else "c",
                    "records": args.records, "operations": n, "threads": args.threads,
                    "runtime_s": runtime, "throughput_ops": n / runtime if runtime else None,
                    "status": status, "error": error, "ops": ops}
            common.append_jsonl(out, line)
            progress.log(f"tls-cost {system} YCSB {line['workload']}: {status}"
                         + (f", {line['throughput_ops']:,.0f} ops/s" if runtime else "")
                         + (f" ({error})" if error else ""))
            if status != "ok":
                break
    finally:
        server.stop()
        server.remove_data()


def run(args):
    """Runs every deployment off and on; appends to bench/results/tls-cost.jsonl."""
    sf = args.sf or (0.01 if args.quick else 1.0)
    args.runs = args.runs or (1 if args.quick else 3)
    args.records = args.records or (10_000 if args.quick else 100_000)
    args.operations = args.operations or (5_000 if args.quick else 100_000)
    deployments = [d.strip() for d in args.deployments.split(",") if d.strip()]
    unknown = set(deployments) - set(DEPLOYMENTS)
    if unknown:
        raise SystemExit(f"unknown deployments: {', '.join(sorted(unknown))}")
    work_dir = args.work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    ycsb.go_ycsb()  # fail early when it is missing
    progress = common.Progress("tls-cost")
    versions = tpch.versions(["cairn-local"])
    versions["go-ycsb"] = "v1.0.1 (pg driver, lib/pq)"
    meta = common.run_metadata(versions)
    out = common.RESULTS / "tls-cost.jsonl"
    data = tpch.generate(sf, work_dir, progress)
    sqls = {n: tpch.query_sql(n, sf) for n in range(1, 23)}
    progress.update("duckdb-parquet", "reference answers")
    ref = tpch.DuckDBExecutor(None, data)
    reference = {n: tpch.normalize(ref.run(sql)) for n, sql in sqls.items()}
    del ref
    for deployment in deployments:
        for secure in (False, True):
            system = deployment + ("-tls" if secure else "")
            base = {"suite": "tls-cost", **meta, "sf": sf, "deployment": deployment,
                    "secure": secure, "system": system}
            run_tpch(system, data, sqls, reference, args, work_dir, progress, base, out)
            run_ycsb_c(system, args, work_dir, progress, base, out)
    progress.done()


def summarize(lines):
    """{deployment: {measure: {False: off value, True: on value}}} of one run: TPC-H
    load seconds, sum and geometric mean of query medians (over the queries both
    settings finished), YCSB load and workload C throughput, C's read p50 and p99."""
    by = {}
    for x in lines:
        by.setdefault(x["deployment"], []).append(x)
    out = {}
    for d, xs in by.items():
        m = {}
        tp = {s: {x["query"]: x for x in xs if x["bench"] == "tpch" and x["secure"] == s
                  and x["status"] == "ok"} for s in (False, True)}
        both = [q for q in tp[False] if q != "load" and q in tp[True]
                and tp[False][q]["median_s"] and tp[True][q]["median_s"]]
        if both:
            m["TPC-H sum of query medians (s)"] = {
                s: sum(tp[s][q]["median_s"] for q in both) for s in (False, True)}
            m["TPC-H geomean query median (s)"] = {
                s: statistics.geometric_mean([tp[s][q]["median_s"] for q in both])
                for s in (False, True)}
        if "load" in tp[False] and "load" in tp[True]:
            m["TPC-H load (s)"] = {s: tp[s]["load"]["load_s"] for s in (False, True)}
        yc = {s: {x["workload"]: x for x in xs if x["bench"] == "ycsb" and x["secure"] == s
                  and x["status"] == "ok"} for s in (False, True)}
        for w, label in (("load", "YCSB load (ops/s)"), ("c", "YCSB C (ops/s)")):
            if w in yc[False] and w in yc[True]:
                m[label] = {s: yc[s][w]["throughput_ops"] for s in (False, True)}
        if "c" in yc[False] and "c" in yc[True]:
            for q in ("p50", "p99"):
                vals = {s: yc[s]["c"]["ops"].get("READ", {}).get(f"{q}_us") for s in (False, True)}
                if all(vals.values()):
                    m[f"YCSB C read {q} (µs)"] = vals
        out[d] = m
    return out
