"""Read-only store served by a cluster: runs `target/release/cairn-bench readonly-serve`,
which starts `cairn local` (one tablet server), creates a store, builds generated rows
(INT64 key, 100-byte value) with the catalog's ring, pushes them and times the push,
then times lookups through the native client (ring routing, StoreGet over loopback
gRPC) from 1 and 16 clients against point lookups on a Cairn table holding the same
rows, and a rollback through the master. It appends one JSON line to
bench/results/readonly-serve.jsonl."""

import subprocess

from . import common

BENCH_BIN = common.REPO / "target" / "release" / "cairn-bench"
CAIRN_BIN = common.REPO / "target" / "release" / "cairn"


def add_arguments(p):
    """Flags of `readonly-serve`."""
    p.add_argument("--quick", action="store_true", help="100,000 rows (seconds)")
    p.add_argument("--rows", type=int, default=1_000_000,
                   help="rows in the store and the table (default 1 million)")
    p.add_argument("--work-dir", help="where the cluster and builds live (default: /tmp)")


def run(args):
    """Runs cairn-bench readonly-serve from the repository root; fails if it fails."""
    rows = 100_000 if args.quick else args.rows
    cmd = [str(BENCH_BIN), "readonly-serve", "--cairn", str(CAIRN_BIN), "--rows", str(rows)]
    if args.work_dir:
        cmd += ["--work-dir", args.work_dir]
    progress = common.Progress("readonly-serve")
    progress.update("cairn", " ".join(cmd[1:]))
    subprocess.run(cmd, cwd=common.REPO, check=True)
    progress.done()
