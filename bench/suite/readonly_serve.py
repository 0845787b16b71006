"""Read-only store served by a cluster: runs `target/release/cairn-bench readonly-serve`,
which starts `cairn local` (one tablet server), creates a store, builds generated rows
(INT64 key, 100-byte value) with the catalog's ring, pushes them and times the push,
then times lookups through the native client (ring routing, StoreGet over loopback
gRPC) from 1 and 16 clients against point lookups on a Cairn table holding the same
rows and primary-key lookups on PostgreSQL (a private server started here, the same
rows loaded with COPY; one connection per client, a prepared SELECT), and a rollback
through the master. It appends one JSON line to bench/results/readonly-serve.jsonl."""

import os
import subprocess
from pathlib import Path

from . import common

BENCH_BIN = common.REPO / "target" / "release" / "cairn-bench"
CAIRN_BIN = common.REPO / "target" / "release" / "cairn"


def add_arguments(p):
    """Flags of `readonly-serve`."""
    p.add_argument("--quick", action="store_true", help="100,000 rows (seconds)")
    p.add_argument("--rows", type=int, default=1_000_000,
                   help="rows in the store and the table (default 1 million)")
    p.add_argument("--work-dir", help="where the cluster and builds live (default: /tmp)")
    p.add_argument("--no-postgres", action="store_true",
                   help="leave PostgreSQL out (it is started from /usr/lib/postgresql)")


def run(args):
    """Runs cairn-bench readonly-serve from the repository root; fails if it fails."""
    rows = 100_000 if args.quick else args.rows
    cmd = [str(BENCH_BIN), "readonly-serve", "--cairn", str(CAIRN_BIN), "--rows", str(rows)]
    if args.work_dir:
        cmd += ["--work-dir", args.work_dir]
    progress = common.Progress("readonly-serve")
    pg = None
    if not args.no_postgres:
        # The postgres user must reach its data directory: a world-readable folder.
        pg_dir = Path(args.work_dir or "/tmp") / "cairn-bench-readonly-serve"
        pg_dir.mkdir(parents=True, exist_ok=True)
        os.chmod(pg_dir, 0o755)
        progress.update("postgres", "starting PostgreSQL")
        pg = common.PostgresServer(pg_dir).start(fresh=True)
        cmd += ["--pg-url", pg.dsn]
    try:
        progress.update("cairn", " ".join(cmd[1:]))
        subprocess.run(cmd, cwd=common.REPO, check=True)
    finally:
        if pg:
            pg.stop()
            pg.remove_data()
    progress.done()
