"""Shared helpers of the benchmark suite.

- paths (repository root, results directory) and run metadata (run id, git revision,
  machine, versions) that every JSON line carries;
- JSON-lines output and a one-line progress display on stderr;
- server processes: start with a log file in the work directory, wait for a port,
  stop with SIGTERM then SIGKILL; everything started is stopped on exit or Ctrl-C;
- the servers themselves: a private PostgreSQL (`PostgresServer`), `cairn local`
  (`CairnLocal`) and a multi-process Cairn cluster (`CairnCluster`), each with
  `start()`, `stop()`, `dsn` and `pids`.
"""

import atexit
import datetime
import glob
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "bench" / "results"
CAIRN_BIN = REPO / "target" / "release" / "cairn"
VENV_BIN = Path(sys.executable).parent
# The bootstrap superuser's password of a Cairn server started with TLS and
# authentication on (a throwaway server on loopback, so a fixed one will do).
SECURE_PASSWORD = "cairn-bench-password"


def git_revision():
    """`git describe --always --dirty` of the repository, or "unknown"."""
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=REPO,
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine():
    """CPU model and count, memory and OS of this machine."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    except (OSError, ValueError, IndexError):
        mem_kb = 0
    return {"cpu": cpu, "cpus": os.cpu_count(), "memory_gib": round(mem_kb / 2**20, 1),
            "os": f"{platform.system()} {platform.release()}",
            "distro": platform.freedesktop_os_release().get("PRETTY_NAME", "")
            if hasattr(platform, "freedesktop_os_release") else ""}


def command_version(cmd):
    """First line a `--version`-style command prints, or "unknown"."""
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        return (out.stdout or out.stderr).strip().splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "unknown"


def run_metadata(versions):
    """The fields every JSON line of one run shares; `versions` names each system's."""
    now = datetime.datetime.now(datetime.timezone.utc)
    return {"run_id": now.strftime("%Y%m%dT%H%M%SZ"),
            "date": now.strftime("%Y-%m-%d %H:%M:%S UTC"),
            "git": git_revision(), "machine": machine(), "versions": versions}


def append_jsonl(path, record):
    """Appends one JSON object as a line to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record) + "\n")


def read_jsonl(path):
    """All JSON objects of a JSON-lines file (none when it is missing)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Progress:
    """One status line on stderr: suite / system / query / run i of n, elapsed time.

    On a terminal the line is rewritten in place (and its clock ticks every second);
    otherwise each new status is printed as its own line."""

    def __init__(self, suite):
        self.suite = suite
        self.tty = sys.stderr.isatty()
        self.t0 = time.monotonic()
        self.status = ""
        self.since = self.t0
        self.lock = threading.Lock()
        if self.tty:
            threading.Thread(target=self._tick, daemon=True).start()

    def _line(self):
        now = time.monotonic()
        return (f"[{self.suite} {now - self.t0:6.0f}s] {self.status}"
                f" ({now - self.since:.0f}s)")

    def _tick(self):
        while True:
            time.sleep(1)
            with self.lock:
                if self.status:
                    sys.stderr.write("\r\033[K" + self._line())
                    sys.stderr.flush()

    def update(self, system, step, i=None, n=None):
        """Shows what runs now: a system, a step (query, load) and run i of n
        (i = 0: the warm-up)."""
        with self.lock:
            run = "" if not n else " / warm-up" if i == 0 else f" / run {i} of {n}"
            self.status = f"{system} / {step}{run}"
            self.since = time.monotonic()
            sys.stderr.write(("\r\033[K" if self.tty else "") + self._line()
                             + ("" if self.tty else "\n"))
            sys.stderr.flush()

    def log(self, message):
        """Prints a message line (keeping the status line below it on a terminal)."""
        with self.lock:
            if self.tty:
                sys.stderr.write("\r\033[K" + message + "\n" + self._line())
            else:
                sys.stderr.write(message + "\n")
            sys.stderr.flush()

    def done(self):
        """Ends the status line."""
        with self.lock:
            self.status = ""
            if self.tty:
                sys.stderr.write("\r\033[K")
            sys.stderr.write(f"[{self.suite}] done in {time.monotonic() - self.t0:.0f} s\n")


# ---- processes ---------------------------------------------------------------------

_running = []  # objects with a stop() method, stopped at exit in reverse order


def track(obj):
    """Registers `obj` (anything with a `stop()` method) to be stopped at exit."""
    _running.append(obj)


def untrack(obj):
    """Forgets `obj` after it has been stopped."""
    if obj in _running:
        _running.remove(obj)


def stop_all():
    """Stops every server this process started and has not stopped yet."""
    while _running:
        _running.pop().stop()


def _on_signal(signum, _frame):
    stop_all()
    sys.exit(128 + signum)


atexit.register(stop_all)
signal.signal(signal.SIGTERM, _on_signal)
signal.signal(signal.SIGINT, _on_signal)


def wait_port(port, timeout=60, host="127.0.0.1", procs=()):
    """Waits until `host:port` accepts TCP connections; fails if a process in `procs`
    exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in procs:
            if p.poll() is not None:
                raise RuntimeError(f"{p.args[0]} exited with status {p.returncode}")
        try:
            socket.create_connection((host, port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout} s")


def start_process(args, log_path, **kwargs):
    """Starts a server process in its own process group, stdout and stderr to log_path."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        return subprocess.Popen([str(a) for a in args], stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True, **kwargs)


def stop_process(p, grace=15):
    """SIGTERM to the process group, SIGKILL after `grace` seconds; waits for the exit."""
    if p.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10)):
        try:
            os.killpg(p.pid, sig)
        except ProcessLookupError:
            return
        try:
            p.wait(wait)
            return
        except subprocess.TimeoutExpired:
            pass


def cpu_seconds(pid):
    """CPU seconds (user + system) process `pid` has used, from /proc; 0 if gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def settle(pids, window=3.0, idle=0.05, max_s=900):
    """Waits until each of the processes `pids` uses under `idle` of a core on average
    over `window` seconds (background flushes and compactions done), at most `max_s`;
    returns the seconds waited. The same rule as `cairn-bench tpch` for one process; an
    idle cluster's processes each spend a few per cent on Raft heartbeats."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < max_s:
        before = sum(cpu_seconds(p) for p in pids)
        time.sleep(window)
        if sum(cpu_seconds(p) for p in pids) - before < idle * window * max(1, len(pids)):
            break
    return time.monotonic() - t0


def wait_sql(dsn, timeout=120, probe="SELECT 1", procs=()):
    """Retries `probe` (one or more statements separated by ';') over pgwire until it
    succeeds; fails if a process in `procs` exits or `timeout` seconds pass."""
    import psycopg
    deadline = time.monotonic() + timeout
    while True:
        try:
            with psycopg.connect(dsn, autocommit=True, connect_timeout=5) as conn:
                for stmt in probe.split(";"):
                    conn.execute(stmt)
            return
        except psycopg.Error as e:
            for p in procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{p.args[0]} exited with status {p.returncode}") from e
            if time.monotonic() > deadline:
                raise TimeoutError(f"{dsn}: {probe!r} failed for {timeout} s: {e}") from e
            time.sleep(0.5)


class PostgresServer:
    """A private PostgreSQL cluster: data directory `work_dir/postgres-data` owned by the
    `postgres` user (initdb, postgres and pg_ctl run as that user via runuser when we
    are root), its own port, `listen_addresses=127.0.0.1`, Unix socket in the data
    directory, trust authentication (initdb --auth=trust), locale C and UTF-8; every
    other setting is PostgreSQL's default. `start()` reuses an existing data directory
    (fresh=True wipes it first)."""

    user = db = "postgres"  # who clients log in as, and where

    def __init__(self, work_dir, port=5439):
        self.data = Path(work_dir) / "postgres-data"
        self.log = Path(work_dir) / "postgres.log"
        self.port = port
        self.proc = None
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))[-1]).parent

    @property
    def dsn(self):
        """libpq connection string of the server."""
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.db}"

    @property
    def pids(self):
        """Process ids of the server (the postmaster; its backends are children)."""
        return [self.proc.pid] if self.proc else []

    def version(self):
        """`postgres --version`."""
        return command_version([self.bin / "postgres", "--version"])

    def _as_postgres(self, args):
        cmd = [str(a) for a in args]
        return ["runuser", "-u", "postgres", "--"] + cmd if os.geteuid() == 0 else cmd

    def start(self, fresh=False):
        """Creates the cluster if needed, starts the server and waits for `SELECT 1`."""
        if fresh and self.data.exists():
            shutil.rmtree(self.data)
        if not (self.data / "PG_VERSION").exists():
            self.data.mkdir(parents=True, exist_ok=True)
            if os.geteuid() == 0:
                shutil.chown(self.data, "postgres", "postgres")
            if subprocess.run(self._as_postgres(["test", "-w", self.data])).returncode:
                raise RuntimeError(f"user postgres cannot write {self.data}: use a work "
                                   "directory every user can reach (e.g. under /tmp)")
            subprocess.run(self._as_postgres(
                [self.bin / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
                 "--locale=C", "-E", "UTF8"]), check=True, capture_output=True)
        if os.geteuid() == 0:
            self.log.touch()
            shutil.chown(self.log, "postgres", "postgres")
        self.proc = start_process(self._as_postgres(
            [self.bin / "postgres", "-D", self.data, "-p", self.port,
             "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.data}"]),
            self.log)
        track(self)
        wait_port(self.port, procs=[self.proc])
        wait_sql(self.dsn, procs=[self.proc])
        return self

    def stop(self):
        """Fast shutdown (SIGINT to the postmaster), SIGKILL if it hangs."""
        if self.proc and self.proc.poll() is None:
            subprocess.run(self._as_postgres([self.bin / "pg_ctl", "stop", "-D", self.data,
                                              "-m", "fast", "-t", "30"]), capture_output=True)
            stop_process(self.proc)
        untrack(self)

    def remove_data(self):
        """Deletes the (stopped) server's data directory, to keep the disk footprint of
        a run to one system at a time."""
        shutil.rmtree(self.data, ignore_errors=True)


def remove_data_dirs(top):
    """Deletes the directories under `top` (server data), keeping its files (logs)."""
    for d in Path(top).iterdir() if Path(top).is_dir() else []:
        if d.is_dir():
            shutil.rmtree(d, ignore_errors=True)


class CairnLocal:
    """`cairn local`: a master and `tservers` tablet servers in one process, a fresh
    data directory `work_dir/cairn-local`, SQL over pgwire on `pg_port` (Flight SQL and
    the web page off); tablet servers listen from `tserver_port` on. Default settings
    otherwise (Raft log fsync on every append). `secure=True` turns on TLS (a CA and
    node certificate made in `work_dir/certs`) and SCRAM-SHA-256 logins as `cairn`."""

    user = db = "cairn"  # who clients log in as, and where

    def __init__(self, work_dir, binary=CAIRN_BIN, pg_port=5434, tservers=1, replicas=1,
                 master_port=7251, tserver_port=7260, secure=False):
        self.work_dir = Path(work_dir)
        self.binary, self.pg_port = binary, pg_port
        self.tservers, self.replicas = tservers, replicas
        self.master_port, self.tserver_port = master_port, tserver_port
        self.secure = secure
        self.certs = self.work_dir / "certs"
        self.password = SECURE_PASSWORD if secure else None
        self.procs = []

    @property
    def dsn(self):
        """libpq connection string of the pgwire front end (with the password and
        `sslmode=verify-full` against the run's CA when secure)."""
        dsn = f"host=127.0.0.1 port={self.port} user={self.user} dbname={self.db}"
        if self.secure:
            dsn += (f" password={self.password} sslmode=verify-full"
                    f" sslrootcert={self.certs / 'ca.pem'}")
        return dsn

    def security_args(self):
        """Flags that turn TLS and authentication on for every Cairn process (none
        when not secure): the run's CA and node certificate on every RPC, pgwire and
        Raft connection, SCRAM-SHA-256 for PostgreSQL clients, and the bootstrap
        superuser's password. Makes the certificates on first use."""
        if not self.secure:
            return []
        if not (self.certs / "node.pem").exists():
            subprocess.run([self.binary, "cert", "ca", "--dir", self.certs], check=True,
                           capture_output=True)
            subprocess.run([self.binary, "cert", "node", "--dir", self.certs, "--name",
                            "node"], check=True, capture_output=True)
        return ["--tls-ca-cert", self.certs / "ca.pem", "--tls-cert", self.certs / "node.pem",
                "--tls-key", self.certs / "node.key"]

    def sql_security_args(self):
        """`security_args()` plus what a process with a SQL front end needs."""
        if not self.secure:
            return []
        return self.security_args() + ["--pg-auth", "scram-sha-256",
                                       "--admin-password", self.password]

    @property
    def port(self):
        """The pgwire port."""
        return self.pg_port

    @property
    def pids(self):
        """Process ids of the Cairn processes."""
        return [p.pid for p in self.procs]

    def start(self):
        """Starts on a fresh data directory and waits until SQL answers."""
        data = self.work_dir / "cairn-local"
        shutil.rmtree(data, ignore_errors=True)
        self.procs = [start_process(
            [self.binary, "local", "--data-dir", data, "--tservers", self.tservers,
             "--replicas", self.replicas, "--master-addr", f"127.0.0.1:{self.master_port}",
             "--tserver-port", self.tserver_port, "--pg-addr", f"127.0.0.1:{self.pg_port}",
             "--flight-sql-addr", "", "--web-addr", ""] + self.sql_security_args(),
            self.work_dir / "cairn-local.log")]
        track(self)
        wait_port(self.pg_port, procs=self.procs)
        wait_sql(self.dsn, procs=self.procs)
        return self

    def stop(self):
        """SIGTERM to every process, SIGKILL after a grace period."""
        for p in reversed(self.procs):
            stop_process(p)
        untrack(self)

    def remove_data(self):
        """Deletes the (stopped) servers' data, keeping their logs."""
        remove_data_dirs(self.work_dir / "cairn-local")


class CairnCluster(CairnLocal):
    """A Cairn cluster of separate processes: one `cairn master` (serving SQL over
    pgwire on `pg_port`, tables replicated `replicas` times by default) and `tservers`
    × `cairn tserver` on ports from `tserver_port`, each with its own fresh data
    directory under `work_dir/cairn-cluster`. Default settings otherwise."""

    def __init__(self, work_dir, binary=CAIRN_BIN, pg_port=5435, tservers=3, replicas=3,
                 master_port=7351, tserver_port=7360, secure=False):
        super().__init__(work_dir, binary, pg_port, tservers, replicas, master_port,
                         tserver_port, secure)

    def start(self):
        """Starts the master and tablet servers and waits until a table with
        `replicas` replicas can be created (enough tablet servers are live)."""
        data = self.work_dir / "cairn-cluster"
        shutil.rmtree(data, ignore_errors=True)
        master = f"127.0.0.1:{self.master_port}"
        self.procs = [start_process(
            [self.binary, "master", "--data-dir", data / "master", "--rpc-addr", master,
             "--default-replicas", self.replicas, "--pg-addr", f"127.0.0.1:{self.pg_port}"]
            + self.sql_security_args(), data / "master.log")]
        track(self)
        for i in range(self.tservers):
            self.procs.append(start_process(
                [self.binary, "tserver", "--data-dir", data / f"tserver{i}", "--rpc-addr",
                 f"127.0.0.1:{self.tserver_port + i}", "--masters", master]
                + self.security_args(), data / f"tserver{i}.log"))
        wait_port(self.pg_port, procs=self.procs)
        wait_sql(self.dsn, procs=self.procs,
                 probe="DROP TABLE IF EXISTS cairn_bench_probe; CREATE TABLE cairn_bench_probe "
                       f"(k BIGINT PRIMARY KEY) WITH (replicas = {self.replicas}); "
                       "DROP TABLE cairn_bench_probe")
        return self

    def remove_data(self):
        """Deletes the (stopped) servers' data, keeping their logs."""
        remove_data_dirs(self.work_dir / "cairn-cluster")


def start_server(system, work_dir):
    """Starts a fresh server for `system` ("cairn-local", "cairn-cluster", either with
    "-tls" appended for TLS and password authentication on, or "postgres") with its
    data and log under `work_dir`; returns it."""
    if system == "postgres":
        return PostgresServer(work_dir).start(fresh=True)
    secure = system.endswith("-tls")
    kind = system.removesuffix("-tls")
    if kind == "cairn-local":
        return CairnLocal(work_dir, secure=secure).start()
    if kind == "cairn-cluster":
        return CairnCluster(work_dir, secure=secure).start()
    raise ValueError(f"no server for system {system!r}")
