"""Storage micro-benchmarks: runs `target/release/cairn-bench storage`, which appends its
own JSON lines to bench/results/storage.jsonl and writes bench/results/storage.md."""

import subprocess

from . import common

BENCH_BIN = common.REPO / "target" / "release" / "cairn-bench"


def add_arguments(p):
    """Flags of `storage`."""
    p.add_argument("--quick", action="store_true", help="scale factor 0.01 (seconds)")
    p.add_argument("--sf", type=float, default=1.0, help="TPC-H scale factor (default 1)")


def run(args):
    """Runs cairn-bench storage from the repository root; fails if it fails."""
    cmd = [str(BENCH_BIN), "storage"] + (["--quick"] if args.quick else ["--sf", f"{args.sf:g}"])
    progress = common.Progress("storage")
    progress.update("cairn", " ".join(cmd[1:]))
    subprocess.run(cmd, cwd=common.REPO, check=True)
    progress.done()
