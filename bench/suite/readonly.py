"""Read-only store benchmark: runs `target/release/cairn-bench readonly`, which builds a
store from generated rows (INT64 key, 100-byte value), times lookups from 1 and 16
threads, install, swap and rollback, and runs LMDB on the same keys and values. It
appends one JSON line to bench/results/readonly.jsonl."""

import subprocess

from . import common

BENCH_BIN = common.REPO / "target" / "release" / "cairn-bench"


def add_arguments(p):
    """Flags of `readonly`."""
    p.add_argument("--quick", action="store_true", help="1 million rows (seconds)")
    p.add_argument("--rows", type=int, default=10_000_000,
                   help="rows in the store (default 10 million)")
    p.add_argument("--work-dir", help="where the store and LMDB live (default: /tmp)")


def run(args):
    """Runs cairn-bench readonly from the repository root; fails if it fails."""
    rows = 1_000_000 if args.quick else args.rows
    cmd = [str(BENCH_BIN), "readonly", "--rows", str(rows)]
    if args.work_dir:
        cmd += ["--work-dir", args.work_dir]
    progress = common.Progress("readonly")
    progress.update("cairn", " ".join(cmd[1:]))
    subprocess.run(cmd, cwd=common.REPO, check=True)
    progress.done()
