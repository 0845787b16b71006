"""Command line of the benchmark suite (run it as bench/run …).

Every measuring sub-command appends JSON lines to bench/results/<suite>.jsonl and then
regenerates bench/results/REPORT.md and its charts.
"""

import argparse
import sys

from . import (common, pgbench, readonly, readonly_serve, report, scaleout, search, storage,
               tlscost, tpch, ycsb)

EPILOG = """examples:
  bench/run tpch --quick                     # SF 0.01, all 7 systems, a few minutes
  bench/run tpch --sf 1 --systems cairn-local,duckdb-parquet --queries 1,6
  bench/run storage --quick
  bench/run tls-cost                         # TLS + auth off vs on: TPC-H SF 1, YCSB C
  bench/run scaleout                         # TPC-H SF 1 CPU on 1, 2, 4 tablet servers
  bench/run pgbench                          # pgbench TPC-B-like: Cairn vs PostgreSQL
  bench/run search --quick                   # hyperspace search, 100,000 objects
  bench/run all --quick                      # tpch, ycsb, storage, then the report
  bench/run report                           # REPORT.md from the JSON lines

Results: bench/results/{tpch,ycsb,pgbench,storage,readonly,readonly-serve,search,tls-cost,
scaleout}.jsonl, bench/results/REPORT.md, charts in
bench/results/charts/. Servers, data and logs go to --work-dir (default /tmp/cairn-bench)."""


def parser():
    """The argument parser with one sub-command per suite."""
    p = argparse.ArgumentParser(
        prog="bench/run", description="Benchmarks Cairn against its peers on the same data, "
        "in the same run.", epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tpch.add_arguments(sub.add_parser(
        "tpch", help="TPC-H, 22 queries: Cairn (local, 3-node cluster), DuckDB, DataFusion, "
        "Spark, PostgreSQL", description=tpch.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    # YCSB lives in suite/ycsb.py, written separately: it adds its own flags.
    ycsb.add_arguments(sub.add_parser(
        "ycsb", help="YCSB workloads A-F with go-ycsb: Cairn vs PostgreSQL",
        description=ycsb.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    pgbench.add_arguments(sub.add_parser(
        "pgbench", help="pgbench's TPC-B-like transaction: Cairn vs PostgreSQL",
        description=pgbench.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    storage.add_arguments(sub.add_parser(
        "storage", help="storage micro-benchmarks (cairn-bench storage)",
        description=storage.__doc__))
    readonly.add_arguments(sub.add_parser(
        "readonly", help="read-only store: build, gets, swap, rollback vs LMDB",
        description=readonly.__doc__))
    readonly_serve.add_arguments(sub.add_parser(
        "readonly-serve", help="read-only store served by cairn local: push, network gets "
        "vs a Cairn table, rollback", description=readonly_serve.__doc__))
    search.add_arguments(sub.add_parser(
        "search", help="hyperspace search: subspaces vs a full scan, PostgreSQL indexes "
        "and DuckDB; the put cost of chaining", description=search.__doc__))
    tlscost.add_arguments(sub.add_parser(
        "tls-cost", help="TPC-H and YCSB C on Cairn with TLS and authentication off and on",
        description=tlscost.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    scaleout.add_arguments(sub.add_parser(
        "scaleout", help="TPC-H on clusters of 1, 2 and 4 tablet servers: CPU per process, "
        "critical path, bytes shuffled, scale-out efficiency", description=scaleout.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    a = sub.add_parser("all", help="tpch, ycsb and storage with their defaults, then report")
    a.add_argument("--quick", action="store_true", help="the quick variant of every suite")
    sub.add_parser("report", help="regenerate REPORT.md and the charts from the JSON lines")
    return p


def run_all(quick):
    """tpch, ycsb and storage with default flags (quick or not); returns failures."""
    failed = []
    for name, mod in (("tpch", tpch), ("ycsb", ycsb), ("storage", storage)):
        sp = argparse.ArgumentParser()
        mod.add_arguments(sp)
        args = sp.parse_args(["--quick"] if quick and "quick" in vars(sp.parse_args([]))
                             else [])
        try:
            mod.run(args)
        except Exception as e:  # noqa: BLE001 - the other suites still run
            print(f"{name} failed: {type(e).__name__}: {e}", file=sys.stderr)
            failed.append(name)
        common.stop_all()
    return failed


def main():
    """Parses the command line, runs the sub-command, regenerates the report."""
    args = parser().parse_args()
    failed = []
    if args.command == "all":
        failed = run_all(args.quick)
    elif args.command != "report":
        {"tpch": tpch, "ycsb": ycsb, "pgbench": pgbench, "storage": storage,
         "readonly": readonly, "readonly-serve": readonly_serve, "search": search,
         "tls-cost": tlscost, "scaleout": scaleout}[args.command].run(args)
    print(f"report: {report.generate()}", file=sys.stderr)
    if failed:
        sys.exit(f"failed: {', '.join(failed)}")


if __name__ == "__main__":
    main()
