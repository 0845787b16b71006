"""pgbench's TPC-B-like transaction through pgwire: Cairn vs. PostgreSQL on the same
script, clients and transaction count, each on a fresh server.

`bench/pgbench/tpcb.sh` creates pgbench's four tables (1 branch, 10 tellers, 1,000
accounts, a history table with a primary key, which Cairn requires) and runs
`bench/pgbench/tpcb.sql` with `pgbench -M prepared --max-tries 1000`: a read-modify-write UPDATE of an
account, a read of it, UPDATEs of a teller and of the single branch (hot rows), an
INSERT into the history, between BEGIN and END. Afterwards it checks that
sum(account) = sum(teller) = sum(branch) = sum(history.delta) and that no transaction
failed; a run whose check fails is recorded with status "error".

Both systems run each BEGIN…END as one transaction at their default isolation, READ
COMMITTED: an UPDATE of a row another open transaction changed waits for it to end
and re-reads the row, so the single branch row serializes the transactions (in
Cairn, a REPEATABLE READ transaction would instead be aborted with SQLSTATE 40001,
first committer wins). pgbench retries a transaction aborted with 40001
(`--max-tries`); the number retried is recorded.

One JSON line per system goes to bench/results/pgbench.jsonl: tps (without the initial
connection time), mean latency, transactions, transactions retried and status.
"""

import os
import re
import subprocess
from pathlib import Path

from . import common

SYSTEMS = ["cairn-local", "postgres", "cairn-cluster"]
DEFAULT_SYSTEMS = ["cairn-local", "postgres"]

TPS = re.compile(r"^tps = (?P<tps>[\d.]+) \(without initial connection time\)", re.M)
RETRIED = re.compile(r"^number of transactions retried: (?P<n>\d+)", re.M)
LATENCY = re.compile(r"^latency average = (?P<ms>[\d.]+) ms", re.M)


def add_arguments(p):
    """Flags of `pgbench`."""
    p.add_argument("--clients", type=int, default=8, help="pgbench clients (default 8)")
    p.add_argument("--transactions", type=int, default=500,
                   help="transactions per client (default 500)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated subset of {','.join(SYSTEMS)} "
                        f"(default {','.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--timeout", type=int, default=1800,
                   help="seconds one system's run may take (default 1800)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/cairn-bench"),
                   help="servers' data and logs (default /tmp/cairn-bench)")


def run(args):
    """Runs the script against each system and appends the results."""
    systems = [s for s in args.systems.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}: choose from {', '.join(SYSTEMS)}")
    work_dir = args.work_dir / "pgbench"
    work_dir.mkdir(parents=True, exist_ok=True)
    versions = {"cairn": common.command_version([str(common.CAIRN_BIN), "--version"])}
    if "postgres" in systems:
        versions["postgres"] = common.PostgresServer(work_dir).version()
    meta = common.run_metadata(versions)
    out = common.RESULTS / "pgbench.jsonl"
    progress = common.Progress("pgbench")
    script = common.REPO / "bench" / "pgbench" / "tpcb.sh"
    for system in systems:
        server = common.start_server(system, work_dir)
        progress.update(system, f"{args.clients} clients × {args.transactions} transactions")
        cmd = [str(script), "--host", "127.0.0.1", "--port", str(server.port),
               "--clients", str(args.clients), "--transactions", str(args.transactions)]
        if system == "postgres":
            cmd.append("--postgres")
        if system == "cairn-cluster":
            cmd += ["--replicas", "3"]
        env = {**os.environ, "PGUSER": server.user, "PGDATABASE": server.db}
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env,
                               timeout=args.timeout)
            text = p.stdout + p.stderr
            status = "ok" if p.returncode == 0 else "error"
            error = None if status == "ok" else " | ".join(text.strip().splitlines()[-3:])
        except subprocess.TimeoutExpired:
            text, status, error = "", "timeout", f"stopped after {args.timeout} s"
        finally:
            server.stop()
        (work_dir / f"pgbench-{system}.log").write_text(text)
        tps = TPS.search(text)
        lat = LATENCY.search(text)
        retried = RETRIED.search(text)
        line = {"suite": "pgbench", **meta, "system": system, "clients": args.clients,
                "transactions": args.clients * args.transactions,
                "tps": float(tps.group("tps")) if tps else None,
                "latency_ms": float(lat.group("ms")) if lat else None,
                "retried": int(retried.group("n")) if retried else None,
                "status": status, "error": error}
        common.append_jsonl(out, line)
        progress.log(f"pgbench {system}: {status}, "
                     + (f"{line['tps']:,.0f} tps" if line["tps"] else "-")
                     + (f" ({error})" if error else ""))
    progress.done()
