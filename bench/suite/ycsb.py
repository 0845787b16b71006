"""YCSB workloads A-F with go-ycsb's PostgreSQL driver: Cairn's pgwire endpoint vs.
PostgreSQL, the same record count, field count and size, and thread count.

Per system: a fresh server, `go-ycsb load` (records inserted with `INSERT … ON
CONFLICT DO NOTHING`, one statement per record), then `go-ycsb run` for each workload
in YCSB's recommended order A, B, C, F, D, E (D and E insert, so they come last). The
workload files are the standard mixes in bench/ycsb (zipfian keys, D latest, E
scans 1-100 rows, 10 fields × 100 bytes); --records and --operations override their
counts. go-ycsb's PostgreSQL driver prepares every statement; workload F's
read-modify-write is a read then an update on one connection, workload E's scan is
`SELECT … WHERE YCSB_KEY >= $1 LIMIT $2` (Cairn answers it in key order; PostgreSQL
walks its primary-key index).

One JSON line per (system, workload) goes to bench/results/ycsb.jsonl: throughput
(operations / run time) and count, mean, p50 and p99 latency per operation type as
go-ycsb measured them; `*_ERROR` operation types make the line's status "error".
"""

import os
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

from . import common

WORKLOADS = ["a", "b", "c", "f", "d", "e"]
SYSTEMS = ["cairn-local", "postgres", "cairn-cluster"]
DEFAULT_SYSTEMS = ["cairn-local", "postgres"]

# One line of go-ycsb's summary: "READ   - Takes(s): 1.4, Count: 1028, OPS: 758.5, …".
OP_LINE = re.compile(r"^(?P<op>[A-Z_]+)\s+- Takes\(s\): (?P<takes>[\d.]+), (?P<rest>.*)$")
FINISHED = re.compile(r"^Run finished, takes (?P<d>.+)$")


def add_arguments(p):
    """Flags of `ycsb`."""
    p.add_argument("--quick", action="store_true",
                   help="10,000 records and 5,000 operations per workload (about a minute)")
    p.add_argument("--records", type=int, default=100_000,
                   help="records loaded (default 100,000; the standard files say 1,000,000)")
    p.add_argument("--operations", type=int, default=100_000,
                   help="operations per workload (default 100,000)")
    p.add_argument("--threads", type=int, default=16, help="client threads (default 16)")
    p.add_argument("--workloads", default=",".join(WORKLOADS),
                   help="comma-separated, run in this order (default a,b,c,f,d,e)")
    p.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS),
                   help=f"comma-separated subset of {','.join(SYSTEMS)} "
                        f"(default {','.join(DEFAULT_SYSTEMS)})")
    p.add_argument("--timeout", type=int, default=1800,
                   help="seconds one load or workload may run before it is stopped and "
                        "recorded as a timeout (default 1800)")
    p.add_argument("--work-dir", type=Path, default=Path("/tmp/cairn-bench"),
                   help="servers' data and logs (default /tmp/cairn-bench)")


def go_ycsb():
    """Path of the go-ycsb binary (PATH or ~/go/bin), or an error saying how to get it."""
    found = shutil.which("go-ycsb") or str(Path.home() / "go" / "bin" / "go-ycsb")
    if not os.access(found, os.X_OK):
        raise SystemExit("go-ycsb not found: run bench/setup")
    return found


def workload_dir():
    """The standard YCSB workload files (bench/ycsb)."""
    return common.REPO / "bench" / "ycsb"


def parse_summary(text):
    """Reads go-ycsb's final summary (the lines after "Run finished"): run time in
    seconds and, per operation type, count, mean, p50 and p99 in microseconds."""
    lines = text.splitlines()
    start = next((i for i, l in enumerate(lines) if FINISHED.match(l)), None)
    if start is None:
        return None, {}
    runtime = parse_duration(FINISHED.match(lines[start]).group("d"))
    ops = {}
    for line in lines[start + 1:]:
        m = OP_LINE.match(line.strip())
        if not m:
            continue
        fields = dict(kv.split(": ", 1) for kv in m.group("rest").split(", ") if ": " in kv)
        ops[m.group("op")] = {"count": int(fields.get("Count", 0)),
                              "ops_per_s": float(fields.get("OPS", 0)),
                              "avg_us": float(fields.get("Avg(us)", 0)),
                              "p50_us": float(fields.get("50th(us)", 0)),
                              "p99_us": float(fields.get("99th(us)", 0))}
    return runtime, ops


def parse_duration(s):
    """Go's time.Duration text ("3.294029101s", "1m2.5s", "850ms") in seconds."""
    units = {"h": 3600, "m": 60, "s": 1, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
    total = 0.0
    for value, unit in re.findall(r"([\d.]+)(h|ms|us|µs|ns|m|s)", s):
        total += float(value) * units[unit]
    return total


def run_ycsb(phase, workload, props, timeout, progress, system, log_path, env=None):
    """Runs `go-ycsb load|run pg` with the workload's files and `props` (and `env` added
    to its environment), streaming its progress lines to the status display; returns
    (status, error, runtime, ops)."""
    d = workload_dir()
    cmd = [go_ycsb(), phase, "pg", "-P", str(d / "common.properties"),
           "-P", str(d / f"workload{workload}.properties")]
    for k, v in props.items():
        cmd += ["-p", f"{k}={v}"]
    step = "load" if phase == "load" else f"workload {workload}"
    progress.update(system, step)
    out = []
    with open(log_path, "a") as log:
        log.write(f"$ {' '.join(cmd)}\n")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env={**os.environ, **(env or {})})
        deadline = time.monotonic() + timeout
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            for line in proc.stdout:
                out.append(line)
                log.write(line)
                if line.startswith("TOTAL"):
                    progress.update(system, f"{step}: {line.split(', Avg')[0].strip()}")
        finally:
            timer.cancel()
            proc.wait()
    text = "".join(out)
    if time.monotonic() >= deadline:
        return "timeout", f"stopped after {timeout} s", None, {}
    runtime, ops = parse_summary(text)
    if proc.returncode != 0 or runtime is None:
        tail = " | ".join(l.strip() for l in out[-5:])
        return "error", f"go-ycsb exited with {proc.returncode}: {tail}", runtime, ops
    errors = {op: v["count"] for op, v in ops.items() if op.endswith("_ERROR")}
    if errors:
        return "error", f"operations failed: {errors} (see {log_path})", runtime, ops
    return "ok", None, runtime, ops


def run(args):
    """Runs the YCSB suite for every selected system and appends the JSON lines."""
    records, operations = (10_000, 5_000) if args.quick else (args.records, args.operations)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    workloads = [w.strip().lower() for w in args.workloads.split(",") if w.strip()]
    for s in systems:
        if s not in SYSTEMS:
            raise SystemExit(f"unknown system {s!r}: choose from {', '.join(SYSTEMS)}")
    for w in workloads:
        if w not in WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}: choose from {', '.join(WORKLOADS)}")
    work_dir = args.work_dir / "ycsb"
    work_dir.mkdir(parents=True, exist_ok=True)
    versions = {"go-ycsb": "v1.0.1 (pg driver, lib/pq)",
                "cairn": common.command_version([str(common.CAIRN_BIN), "--version"])}
    if "postgres" in systems:
        versions["postgres"] = common.PostgresServer(work_dir).version()
    meta = common.run_metadata(versions)
    out = common.RESULTS / "ycsb.jsonl"
    progress = common.Progress("ycsb")
    for system in systems:
        server = common.start_server(system, work_dir)
        conn = {"pg.host": "127.0.0.1", "pg.port": server.port, "pg.user": server.user,
                "pg.db": server.db}
        log_path = work_dir / f"go-ycsb-{system}.log"
        log_path.unlink(missing_ok=True)
        base = {**conn, "recordcount": records, "operationcount": operations,
                "threadcount": args.threads}
        try:
            phases = [("load", "a")] + [("run", w) for w in workloads]
            for phase, w in phases:
                props = dict(base, dropdata="true") if phase == "load" else base
                status, error, runtime, ops = run_ycsb(
                    phase, w, props, args.timeout, progress, system, log_path)
                n = records if phase == "load" else operations
                line = {"suite": "ycsb", **meta, "system": system,
                        "workload": "load" if phase == "load" else w,
                        "load": phase == "load", "records": records, "operations": n,
                        "threads": args.threads, "runtime_s": runtime,
                        "throughput_ops": n / runtime if runtime else None,
                        "status": status, "error": error, "ops": ops}
                common.append_jsonl(out, line)
                tput = f"{line['throughput_ops']:,.0f} ops/s" if runtime else "-"
                progress.log(f"ycsb {system} {line['workload']}: {status}, {tput}"
                             + (f" ({error})" if error else ""))
                if phase == "load" and status != "ok":
                    break  # the workloads need the loaded records
        finally:
            server.stop()
    progress.done()
