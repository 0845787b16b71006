"""bench/results/REPORT.md and the PNG charts in bench/results/charts/, from the JSON
lines of every suite: for each suite the newest run at each scale (TPC-H: scale factor;
YCSB: record count; storage: scale factor, runs told apart by date + git revision).
Headline ratios first, then per-suite tables, provenance and each system's settings.
Suites without results are skipped."""

import math
from collections import defaultdict

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402 - after choosing the Agg backend

from . import common, tlscost  # noqa: E402

CHARTS = common.RESULTS / "charts"
CAIRNS = ["cairn-local", "cairn-cluster"]
PEERS = ["duckdb-parquet", "duckdb-native", "datafusion-parquet", "spark", "postgres"]
ORDER = CAIRNS + PEERS
YCSB_OPS = ["READ", "UPDATE", "INSERT", "SCAN", "READ_MODIFY_WRITE"]

SETTINGS = """\
- **cairn-local**: `target/release/cairn local`, 1 tablet server, replicas 1, defaults
  (Raft log fsync on every append), SQL over pgwire (psycopg, autocommit, text results).
  Tables from `bench/tpch/schema.sql` (primary keys, hash partitions on them), loaded with
  `COPY t FROM 'file.parquet'`. After the load the suite waits until the Cairn processes
  use under 5% of a core over 3 s (background flushes and compactions settled, the same
  rule as `cairn-bench tpch`); that wait is reported as "settle", not as load time.
- **cairn-cluster**: one `cairn master` (pgwire front end: SQL runs on the master) and
  3 `cairn tserver` processes on this machine, default replicas 3, defaults otherwise;
  same schema, load and settle rule.
- **duckdb-parquet**: DuckDB (Python), in-memory database, views over `read_parquet` of
  the tpchgen-cli files; defaults (threads = cores). Its answers are the reference.
- **duckdb-native**: DuckDB tables made with `CREATE TABLE AS SELECT * FROM read_parquet`
  in a database file (load time = that), queried read-only; defaults.
- **datafusion-parquet**: DataFusion (Python) `SessionContext` with `register_parquet`;
  defaults.
- **spark**: PySpark `local[*]`, `spark.driver.memory=4g`, UI off, temp views over the
  Parquet files; defaults otherwise.
- **postgres**: a private PostgreSQL cluster (initdb `--auth=trust --locale=C -E UTF8`,
  `listen_addresses=127.0.0.1`, its own port), default settings otherwise (shared_buffers
  128 MB, autovacuum on). Tables with Cairn's primary keys, loaded with server-side
  `COPY … (FORMAT csv)` from CSV files DuckDB wrote from the Parquet files (not counted);
  load time = COPY + ANALYZE.
- **Method**: systems run one after another, each in its own worker process; servers
  are stopped when their system is done. Per query one warm-up (its rows are compared
  with duckdb-parquet's as multisets: numbers as floats within 1e-6 relative or 0.01
  absolute, dates as ISO strings, strings stripped), then the median of the timed runs
  (wall time to execute and fetch all rows). A query past the timeout is cancelled
  (killed if it does not stop) and recorded as a timeout.
- **YCSB**: go-ycsb's PostgreSQL driver with the standard workload mixes in
  `bench/ycsb/`; `bench/suite/ycsb.py` documents threads, record counts and servers.
- **storage**: `target/release/cairn-bench storage` (one tablet vs one Parquet file,
  TPC-H lineitem); its own notes are in `bench/results/storage.md`.
"""


def newest(lines, scale_key, run_key):
    """{scale: lines of the newest run at that scale}."""
    by_scale = defaultdict(list)
    for line in lines:
        by_scale[line.get(scale_key)].append(line)
    out = {}
    for scale, group in by_scale.items():
        last = max(run_key(x) for x in group)
        out[scale] = [x for x in group if run_key(x) == last]
    return dict(sorted(out.items(), key=lambda kv: (kv[0] is None, kv[0] or 0)))


def geomean(xs):
    """Geometric mean of positive numbers."""
    return math.exp(sum(map(math.log, xs)) / len(xs))


def ratio_words(r):
    """A ratio Cairn/peer of times as "2.6x slower" / "1.4x faster"."""
    return f"{r:.2f}x slower" if r >= 1 else f"{1 / r:.2f}x faster"


def secs(s):
    """Seconds for a table cell."""
    return "—" if s is None else f"{s:.3f}" if s < 10 else f"{s:.1f}"


def table(header, rows):
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


def provenance(line, extra=""):
    """Run id, date, git revision, machine and versions of a run, as Markdown."""
    m = line.get("machine", {})
    versions = ", ".join(f"{k} {v.removeprefix(k + ' ')}"
                         for k, v in sorted(line.get("versions", {}).items()))
    return (f"Run `{line.get('run_id', line.get('date'))}` ({line.get('date')}), git "
            f"`{line.get('git')}`{extra}. Machine: {m.get('cpus')} × {m.get('cpu')}, "
            f"{m.get('memory_gib')} GiB, {m.get('distro') or ''} {m.get('os', '')}."
            + (f" Versions: {versions}." if versions else "") + "\n")


# ---- TPC-H ---------------------------------------------------------------------------

def tpch_ratios(by):
    """{(cairn, peer): [(query, cairn_s / peer_s)]} over queries both finished."""
    out = {}
    for c in CAIRNS:
        for p in PEERS:
            if c in by and p in by:
                out[c, p] = [(q, r["median_s"] / by[p][q]["median_s"])
                             for q, r in by[c].items()
                             if r["median_s"] and by[p].get(q, {}).get("median_s")]
    return out


def tpch_headline(sf, by):
    """Headline for one TPC-H scale factor: a table of geomean ratios, then sentences."""
    ratios = tpch_ratios(by)
    peers = [p for p in PEERS if any((c, p) in ratios and ratios[c, p] for c in CAIRNS)]
    rows = [[c] + [f"{geomean([r for _, r in ratios[c, p]]):.2f} ({len(ratios[c, p])} q)"
                   if ratios.get((c, p)) else "—" for p in peers]
            for c in CAIRNS if any(ratios.get((c, p)) for p in peers)]
    out = [f"TPC-H SF {sf:g}: geometric mean over the queries both finished of Cairn time /"
           " peer time (above 1: Cairn slower)"
           + (" — at this small scale factor fixed per-query costs (planning, client round"
              " trips) dominate" if sf < 1 else "") + ":\n\n"
           + table(["Cairn"] + [f"vs {p}" for p in peers], rows)] if rows else []
    for (c, p), rs in ratios.items():
        if not rs:
            continue
        slower = sum(r > 1 for _, r in rs)
        g = geomean([r for _, r in rs])
        verdict = (f"**{c} is slower than {p}** on {slower} of {len(rs)} queries"
                   if g >= 1 else f"{c} is faster than {p} on {len(rs) - slower} of "
                   f"{len(rs)} queries" + (f" (slower on {slower})" if slower else ""))
        out.append(f"- TPC-H SF {sf:g}: {verdict}; geomean {ratio_words(g)}.")
    for s in ORDER:
        bad = [f"{q} {r['status']}" for q, r in by.get(s, {}).items() if r["status"] != "ok"]
        wrong = [q for q, r in by.get(s, {}).items() if r["answer"] == "mismatch"]
        if bad or wrong:
            out.append(f"- TPC-H SF {sf:g}: {s}: "
                       + "; ".join(filter(None, [", ".join(bad), wrong and
                                                 "answers differ on " + ", ".join(wrong)])))
    return out


def tpch_section(sf, lines):
    """The TPC-H section for one scale factor, with its charts."""
    by, loads = defaultdict(dict), {}
    for x in lines:
        (loads if x["query"] == "load" else by[x["system"]])[
            x["system"] if x["query"] == "load" else x["query"]] = x
    systems = [s for s in ORDER if s in by] + sorted(set(by) - set(ORDER))
    queries = sorted({q for s in by.values() for q in s}, key=lambda q: int(q[1:]))
    md = [f"## TPC-H, scale factor {sf:g}\n\n", provenance(lines[0])]
    mark = {"match": " ✓", "mismatch": " ✗", "n/a": ""}
    rows = [[q] + ["" if q not in by[s] else secs(by[s][q]["median_s"])
                   + mark[by[s][q]["answer"]] if by[s][q]["status"] == "ok"
                   else f"*{by[s][q]['status']}*" for s in systems] for q in queries]
    totals = [secs(sum(r["median_s"] for r in by[s].values() if r["median_s"])) for s in systems]
    rows.append(["**sum**"] + [f"**{t}**" for t in totals])
    if systems:
        md += ["\nMedian seconds per query (✓ same answer as duckdb-parquet, ✗ different):"
               "\n\n", table(["query"] + systems, rows)]
    ratios = tpch_ratios(by)
    for c in CAIRNS:
        peers = [p for p in PEERS if (c, p) in ratios]
        if not peers:
            continue
        per = {p: dict(ratios[c, p]) for p in peers}
        rows = [[q] + [f"{per[p][q]:.2f}" if q in per[p] else "—" for p in peers]
                for q in queries]
        rows.append(["**geomean**"] + [f"**{geomean(list(per[p].values())):.2f}**"
                                       if per[p] else "—" for p in peers])
        md += [f"\nRatio {c} time / peer time (above 1: Cairn slower):\n\n",
               table(["query"] + [f"/ {p}" for p in peers], rows)]
    if loads:
        md += ["\nLoad (all 8 tables):\n\n", table(
            ["system", "load (s)", "settle after load (s)", "status"],
            [[s, secs(x.get("load_s")), secs(x.get("settle_s")),
              x["status"] + (f": {x['error']}" if x.get("error") else "")]
             for s, x in sorted(loads.items(), key=lambda kv: ORDER.index(kv[0])
                                if kv[0] in ORDER else 99)])]
    problems = [f"- {s} {q}: {r['status']}"
                + (f": {r['error']}" if r.get("error") else "")
                + (f" — answer: {r['diff']}" if r.get("diff") else "")
                for s in systems for q, r in by[s].items()
                if r["status"] != "ok" or r["answer"] == "mismatch"]
    if problems:
        md += ["\nErrors, timeouts and different answers:\n\n", "\n".join(problems) + "\n"]
    md.append("\n" + chart_tpch(sf, by, systems, queries, loads) + "\n")
    return "".join(md)


def chart_tpch(sf, by, systems, queries, loads):
    """Per-query chart and load bars; returns their Markdown image links."""
    name = f"tpch_sf{sf:g}"
    CHARTS.mkdir(parents=True, exist_ok=True)
    out = ""
    if systems:
        chart_queries(sf, by, systems, queries, CHARTS / f"{name}_queries.png")
        out = f"![TPC-H SF {sf:g} per query](charts/{name}_queries.png)\n"
    done = {s: x["load_s"] for s, x in loads.items() if x.get("load_s")}
    if done:
        fig, ax = plt.subplots(figsize=(7, 0.5 * len(done) + 1.2))
        ax.barh(list(done), list(done.values()),
                color=[f"C{ORDER.index(s) if s in ORDER else 9}" for s in done])
        for y, v in enumerate(done.values()):
            ax.text(v, y, f" {v:.1f} s", va="center", fontsize=8)
        ax.set_xlim(0, max(done.values()) * 1.15)
        ax.set_xlabel("load seconds (lower is better)")
        ax.set_title(f"TPC-H SF {sf:g} load")
        ax.invert_yaxis()
        fig.tight_layout()
        fig.savefig(CHARTS / f"{name}_load.png", dpi=110)
        plt.close(fig)
        out += f"\n![TPC-H SF {sf:g} load](charts/{name}_load.png)\n"
    return out


def chart_queries(sf, by, systems, queries, path):
    """Grouped bars per query, one per system, log seconds; cairn-local / duckdb-parquet
    ratios above the groups."""
    fig, ax = plt.subplots(figsize=(max(10, len(queries) * 0.9), 6))
    width = 0.8 / len(systems)
    for i, s in enumerate(systems):
        xs = [j + (i - (len(systems) - 1) / 2) * width for j, q in enumerate(queries)
              if by[s].get(q, {}).get("median_s")]
        ys = [by[s][q]["median_s"] for q in queries if by[s].get(q, {}).get("median_s")]
        ax.bar(xs, ys, width, label=s, color=f"C{ORDER.index(s) if s in ORDER else i}")
    ax.set_yscale("log")
    ax.set_xticks(range(len(queries)), queries)
    ax.set_ylabel("median seconds (log scale)")
    ax.set_xlim(-0.6, len(queries) - 0.4)
    ax.set_title(f"TPC-H SF {sf:g}, median seconds per query (lower is better); "
                 "numbers above: cairn-local / duckdb-parquet", pad=20)
    for j, q in enumerate(queries):
        a = by.get("cairn-local", {}).get(q, {}).get("median_s")
        b = by.get("duckdb-parquet", {}).get(q, {}).get("median_s")
        if a and b:
            ax.text(j, 1.01, f"{a / b:.1f}x", ha="center", va="bottom", fontsize=8,
                    transform=ax.get_xaxis_transform())
    ax.legend(fontsize=8, ncol=len(systems), loc="upper center", bbox_to_anchor=(0.5, -0.07))
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---- YCSB ----------------------------------------------------------------------------

def ycsb_headline(records, lines):
    """Headline sentences: Cairn throughput / PostgreSQL throughput per workload."""
    tput = {(x["system"], x["workload"]): x["throughput_ops"] for x in lines
            if x["status"] == "ok" and x.get("throughput_ops")}
    out = []
    for c in CAIRNS:
        rs = [(w, tput[c, w] / tput["postgres", w]) for (s, w) in sorted(tput)
              if s == c and w != "load" and ("postgres", w) in tput]
        if rs:
            slower = [w for w, r in rs if r < 1]
            load = (f"; load phase {tput[c, 'load'] / tput['postgres', 'load']:.2f}"
                    if (c, "load") in tput and ("postgres", "load") in tput else "")
            out.append(f"- YCSB ({records} records): {c} / postgres throughput: "
                       + ", ".join(f"{w} {r:.2f}" for w, r in rs) + load
                       + (f"; **{c} is slower than postgres on {len(slower)} of {len(rs)} "
                          f"workloads** ({', '.join(slower)})" if slower
                          else f"; faster on all {len(rs)} workloads") + ".")
    return out


def ycsb_section(records, lines):
    """The YCSB section for one record count, with its charts."""
    systems = sorted({x["system"] for x in lines},
                     key=lambda s: ORDER.index(s) if s in ORDER else 99)
    workloads = sorted({x["workload"] for x in lines if not x.get("load")})
    by = {(x["system"], x["workload"]): x for x in lines}
    md = [f"## YCSB, {records} records\n\n", provenance(lines[0])]
    rows = []
    for w in ["load"] + workloads:
        cells = []
        for s in systems:
            x = by.get((s, w))
            cells.append("" if x is None else f"{x['throughput_ops']:,.0f}"
                         if x["status"] == "ok" else f"*{x['status']}*")
        pg = by.get(("postgres", w))
        rat = [f"{by[c, w]['throughput_ops'] / pg['throughput_ops']:.2f}"
               if pg and (c, w) in by and by[c, w]["status"] == "ok" and pg["status"] == "ok"
               else "—" for c in CAIRNS if c in systems]
        rows.append([w] + cells + rat)
    head = ["workload"] + [f"{s} (ops/s)" for s in systems] + [
        f"{c} / postgres" for c in CAIRNS if c in systems]
    md += ["\nThroughput (higher is better):\n\n", table(head, rows)]
    # The load line counts records, not operations.
    x0 = next((x for x in lines if not x.get("load")), lines[0])
    md.append(f"\n{x0.get('records'):,} records loaded, {x0.get('operations'):,} operations "
              f"per workload, {x0.get('threads')} client threads.\n")
    rows = [[w, op, s, f"{o['count']:,}", f"{o['avg_us']:.0f}", f"{o['p50_us']:.0f}",
             f"{o['p99_us']:.0f}"]
            for (s, w), x in sorted(by.items(), key=lambda kv: (kv[0][1], kv[0][0]))
            for op, o in (x.get("ops") or {}).items()]
    if rows:
        md += ["\nLatency per operation (µs):\n\n",
               table(["workload", "operation", "system", "count", "avg", "p50", "p99"], rows)]
    errors = [f"- {s} {w}: {x.get('error')}" for (s, w), x in by.items() if x["status"] != "ok"]
    if errors:
        md += ["\nErrors:\n\n", "\n".join(errors) + "\n"]
    md.append("\n" + chart_ycsb(records, by, systems, workloads) + "\n")
    return "".join(md)


def chart_ycsb(records, by, systems, workloads):
    """Throughput per workload and p50/p99 latency per operation; Markdown images."""
    name = f"ycsb_{records}"
    CHARTS.mkdir(parents=True, exist_ok=True)
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, s in enumerate(systems):
        pts = [(j, by[s, w]["throughput_ops"]) for j, w in enumerate(workloads)
               if (s, w) in by and by[s, w]["status"] == "ok"]
        ax.bar([j + (i - (len(systems) - 1) / 2) * width for j, _ in pts],
               [v for _, v in pts], width, label=s, color=f"C{ORDER.index(s)}"
               if s in ORDER else None)
    ax.set_xticks(range(len(workloads)), [f"workload {w}" for w in workloads])
    ax.set_ylabel("operations per second (higher is better)")
    ax.set_title(f"YCSB throughput, {records} records")
    ax.legend()
    fig.tight_layout()
    fig.savefig(CHARTS / f"{name}_throughput.png", dpi=110)
    plt.close(fig)
    ops = [op for op in YCSB_OPS if any(op in (by[k].get("ops") or {}) for k in by)]
    if not ops:
        return f"![YCSB throughput](charts/{name}_throughput.png)\n"
    fig, axes = plt.subplots(1, len(ops), figsize=(4 * len(ops), 4.5), squeeze=False)
    for ax, op in zip(axes[0], ops):
        wls = [w for w in workloads if any(op in (by.get((s, w), {}).get("ops") or {})
                                           for s in systems)]
        for i, s in enumerate(systems):
            pts = [(j, by[s, w]["ops"][op]) for j, w in enumerate(wls)
                   if op in (by.get((s, w), {}).get("ops") or {})]
            xs = [j + (i - (len(systems) - 1) / 2) * width for j, _ in pts]
            color = f"C{ORDER.index(s)}" if s in ORDER else None
            ax.bar(xs, [o["p99_us"] for _, o in pts], width, color=color, alpha=0.4,
                   label=f"{s} p99")
            ax.bar(xs, [o["p50_us"] for _, o in pts], width, color=color, label=f"{s} p50")
        ax.set_yscale("log")
        ax.set_xlim(-0.6, max(len(wls), 3) - 0.4)
        ax.set_xticks(range(len(wls)), wls)
        ax.set_title(op)
        ax.set_xlabel("workload")
    axes[0][0].set_ylabel("latency µs (log; solid p50, light p99)")
    axes[0][-1].legend(fontsize=7)
    fig.suptitle(f"YCSB latency per operation, {records} records")
    fig.tight_layout()
    fig.savefig(CHARTS / f"{name}_latency.png", dpi=110)
    plt.close(fig)
    return (f"![YCSB throughput](charts/{name}_throughput.png)\n\n"
            f"![YCSB latency](charts/{name}_latency.png)\n")


# ---- storage -------------------------------------------------------------------------

def fmt_value(v, unit):
    """A storage measurement with its unit, scaled for reading."""
    if v is None:
        return "—"
    if unit == "rows/s":
        return f"{v / 1e6:.2f} M rows/s" if v >= 1e6 else f"{v / 1e3:.0f} k rows/s"
    if unit == "s":
        return f"{v * 1e3:.1f} ms" if v >= 1e-3 else f"{v * 1e6:.1f} µs"
    if unit in ("us", "µs"):
        return f"{v:.1f} µs"
    if unit == "bytes":
        return f"{v / 2**20:.1f} MiB"
    return f"{v:g} {unit}"


def storage_headline(sf, lines):
    """Headline: how many of the storage targets the newest run met."""
    targets = [x for x in lines if x.get("target")]
    met = [x for x in targets if x.get("met")]
    missed = ", ".join(x["measurement"] for x in targets if not x.get("met"))
    return [f"- Storage (SF {sf:g}): {len(met)} of {len(targets)} targets met"
            + (f"; missed: {missed}." if missed else ".")]


def storage_section(sf, lines):
    """The storage section for one scale factor (the newest run's lines)."""
    rows = [[x["label"], fmt_value(x.get("cairn"), x.get("unit")),
             f"{fmt_value(x.get('peer_value'), x.get('peer_unit'))} ({x['peer']})"
             if x.get("peer") else "—",
             f"{x['ratio']:.2f}" if x.get("ratio") is not None else "—",
             x.get("target") or "—", ("yes" if x["met"] else "**no**") if "met" in x else "—"]
            for x in lines]
    return (f"## Storage micro-benchmark, scale factor {sf:g}\n\n"
            f"Run {lines[0]['date']}, git `{lines[0]['git']}`, {lines[0].get('rows')} "
            "lineitem rows (machine and notes: `storage.md`). Ratio = Cairn speed / peer "
            "speed (above 1: Cairn faster).\n\n"
            + table(["measurement", "Cairn", "peer", "ratio", "target", "met"], rows))


# ---- read-only stores ----------------------------------------------------------------

# The read-only store targets: (label, field, limit, lower is better).
READONLY_TARGETS = [
    ("server-side get p50 (1 thread) ≤ 30 µs", lambda x: x["get1"]["cairn_p50_us"], 30.0),
    ("swap ≤ 10 ms", lambda x: x["swap_ms"], 10.0),
    ("rollback ≤ 10 ms", lambda x: x["rollback_ms"], 10.0),
]


def readonly_build_rate(x):
    """Rows per second of the build."""
    return x["rows"] / x["build_s"]


def readonly_headline(rows, lines):
    """Headline: the newest run's targets, met or not."""
    x = lines[-1]
    met = [label for label, f, limit in READONLY_TARGETS if f(x) <= limit]
    rate = readonly_build_rate(x)
    missed = [label for label, f, limit in READONLY_TARGETS if f(x) > limit]
    if rate < 1e6:
        missed.append("build ≥ 1 M rows/s")
    else:
        met.append("build ≥ 1 M rows/s")
    return [f"- Read-only store ({rows:,} rows, one node, lookups in process): "
            f"{len(met)} of the {len(met) + len(missed)} targets measured so far met"
            + (f"; missed: {', '.join(missed)}" if missed else "")
            + " (push and gets over the network: the cluster section)."
            + f" Get p50 {x['get1']['cairn_p50_us']:.1f} µs against LMDB "
            f"{x['get1']['lmdb_p50_us']:.1f} µs."]


def readonly_history(history):
    """One paragraph on every run at a size (oldest first): the build rate and the
    slowest swap vary from run to run, so the newest run alone can hide a miss."""
    if len(history) < 2:
        return ""
    rates = [readonly_build_rate(h) for h in history]
    swaps = [h["swap_max_ms"] for h in history if "swap_max_ms" in h]
    return (f"\n\nEvery run at this size, oldest first (the table is the newest): build "
            f"{' / '.join(fmt(r) for r in rates)} rows/s, at least 1,000,000 in "
            f"{sum(r >= 1e6 for r in rates)} of {len(rates)}; slowest swap "
            f"{' / '.join(f'{m:.2f}' for m in swaps)} ms, at most 10 in "
            f"{sum(m <= 10 for m in swaps)} of {len(swaps)}.\n")


def readonly_section(rows, lines, history=()):
    """The read-only store section for one size (the newest run), then a line on every
    run at that size (`history`, oldest first)."""
    x = lines[-1]
    g1, g16 = x["get1"], x["get16"]
    body = [
        ["build (rows/s)", fmt(readonly_build_rate(x)),
         f"{fmt(rows / x['lmdb_load_s'])} (sorted input, MDB_APPEND)",
         f"{readonly_build_rate(x) / (rows / x['lmdb_load_s']):.2f}", "≥ 1,000,000",
         "yes" if readonly_build_rate(x) >= 1e6 else "**no**"],
        ["get p50, 1 thread (µs)", f"{g1['cairn_p50_us']:.2f}", f"{g1['lmdb_p50_us']:.2f}",
         f"{g1['cairn_p50_us'] / g1['lmdb_p50_us']:.2f}", "≤ 30",
         "yes" if g1["cairn_p50_us"] <= 30 else "**no**"],
        ["get p99, 1 thread (µs)", f"{g1['cairn_p99_us']:.2f}", f"{g1['lmdb_p99_us']:.2f}",
         f"{g1['cairn_p99_us'] / g1['lmdb_p99_us']:.2f}", "—", "—"],
        ["gets/s, 16 threads", fmt(g16["cairn_ops"]), fmt(g16["lmdb_ops"]),
         f"{g16['cairn_ops'] / g16['lmdb_ops']:.2f}", "—", "—"],
        ["get p99, 16 threads (µs)", f"{g16['cairn_p99_us']:.2f}",
         f"{g16['lmdb_p99_us']:.2f}", f"{g16['cairn_p99_us'] / g16['lmdb_p99_us']:.2f}",
         "—", "—"],
        ["install: verify every MD5 (s)", f"{x['install_s']:.2f}", "—", "—", "—", "—"],
        ["swap, median / max (ms)", f"{x['swap_ms']:.3f} / {x['swap_max_ms']:.3f}", "—", "—",
         "median ≤ 10", "yes" if x["swap_ms"] <= 10 else "**no**"],
        ["rollback, median / max (ms)",
         f"{x['rollback_ms']:.3f} / {x['rollback_max_ms']:.3f}", "—", "—", "median ≤ 10",
         "yes" if x["rollback_ms"] <= 10 else "**no**"],
    ]
    return (f"## Read-only store, {rows:,} rows\n\n"
            f"Run {x['date']}, git `{x['git']}`, {x['cpus']} × {x['machine']}, "
            f"{x['memory']}. `cairn-bench readonly`: one node's store of {rows:,} rows "
            f"(INT64 key, {x['value_bytes']}-byte value; {x['build_bytes']:,} bytes of chunk "
            f"files, {x['spilled_bytes']:,} bytes spilled while building) against LMDB "
            "(heed) holding the same key and value bytes"
            + (f" ({x['lmdb_bytes']:,} bytes of data.mdb)" if "lmdb_bytes" in x else "")
            + ". Lookups are in process (server-side, no network), uniformly random "
            "present keys. "
            + ("Each store is warmed (every key read once) and measured in turn, all in "
               "the page cache; at 100 M rows the two do not fit in memory together. "
               if "lmdb_bytes" in x else "Both stores warm in the page cache. ")
            + "Ratio = Cairn / LMDB (for µs above 1 means Cairn is "
            "slower; for rates below 1). Push, gets through the network and the comparison "
            "with Cairn tables and PostgreSQL are in the cluster section.\n\n"
            + table(["measurement", "Cairn", "LMDB", "ratio", "target", "met"], body)
            + readonly_history(list(history)))


def readonly_serve_section(rows, lines):
    """The served read-only store section for one size (the newest run)."""
    x = lines[-1]
    has_pg = "pg_p50_us" in x
    body = []
    for label, s, t, p in (("1 client", "store", "table", "pg"),
                           ("16 clients", "store16", "table16", "pg16")):
        for what, key, digits in ((f"get p50, {label} (µs)", "_p50_us", 0),
                                  (f"get p99, {label} (µs)", "_p99_us", 0),
                                  (f"gets/s, {label}", "_ops", None)):
            show = (lambda v: fmt(v)) if digits is None else (lambda v: f"{v:.0f}")
            row = [what, show(x[s + key]), show(x[t + key]),
                   f"{x[s + key] / x[t + key]:.2f}"]
            if has_pg:
                row += [show(x[p + key]), f"{x[s + key] / x[p + key]:.2f}"]
            body.append(row)
    dash = ["—", "—"] if has_pg else []
    load = ["load: build / bulk load / COPY (s)" if has_pg else "load: build / bulk load (s)",
            f"{x['build_s']:.2f}", f"{x['table_load_s']:.2f}",
            f"{x['build_s'] / x['table_load_s']:.2f}"]
    if has_pg:
        load += [f"{x['pg_load_s']:.2f}", f"{x['build_s'] / x['pg_load_s']:.2f}"]
    body += [
        load,
        ["push: fetch, verify, swap (s)", f"{x['push_s']:.2f} (second: {x['push2_s']:.2f})",
         "—", "—"] + dash,
        ["rollback: server swap / whole call (ms)",
         f"{x['rollback_swap_ms']:.2f} / {x['rollback_call_ms']:.1f}", "—", "—"] + dash,
    ]
    header = ["measurement", "store", "Cairn table", "store / table"]
    if has_pg:
        header += ["PostgreSQL", "store / PostgreSQL"]
    peers = ("`Client::get` on a Cairn table with the same rows (bulk-loaded, flushed)"
             + (" and PostgreSQL primary-key lookups on the same rows (a private server with "
                "default settings, `COPY`-loaded and `VACUUM ANALYZE`d; one connection per "
                "client, a prepared `SELECT v FROM recs_pg WHERE id = $1`)" if has_pg else ""))
    return (f"## Read-only store served by a cluster, {rows:,} rows\n\n"
            f"Run {x['at']}, git `{x['rev']}`, {x['cpu']}. `cairn-bench readonly-serve`: "
            f"`cairn local` with one tablet server; a store of {rows:,} rows (INT64 key, "
            f"{x['value_bytes']}-byte value, {x['bytes']:,} bytes of chunk files) built with "
            "the catalog's ring and pushed, looked up through the native client "
            f"(`StoreReader`: ring routing, `StoreGet` over loopback gRPC), against {peers}. "
            "Uniformly random present keys, all warm. Ratios are store / peer (for µs above "
            "1 means the store is slower; for rates below 1). Not measured yet: several "
            "servers, 100 M rows.\n\n"
            + table(header, body))


# ---- hyperspace search ---------------------------------------------------------------

SEARCH_KINDS = (("equality", "`a = x` (about 10 objects)"),
                ("range", "`b >= x AND b < x + 100` (about 100)"),
                ("count", "`count(*) WHERE c = x` (about objects / 1,000)"))


def search_key(x):
    """What a search run is grouped by: its size and whether it ran on a cluster."""
    return (x["objects"], x["tservers"], x["replicas"])


def search_headline(key, x):
    """Headline bullets of the newest search run of one size."""
    objects, tservers, replicas = key
    eq, rng = x["single"]["equality"], x["single"]["range"]
    pc = x["put_cost"]
    out = [f"- Hyperspace search, {objects:,} objects ({tservers} server(s), replicas "
           f"{replicas}): equality search p50 {eq['subspace']['p50_us']:,.0f} µs, "
           f"{eq['full_scan']['p50_us'] / eq['subspace']['p50_us']:.0f}x faster than a full "
           f"scan; range search {rng['full_scan']['p50_us'] / rng['subspace']['p50_us']:.0f}x"
           + (f"; {eq['subspace']['p50_us'] / eq['postgres']['p50_us']:.1f}x and "
              f"{rng['subspace']['p50_us'] / rng['postgres']['p50_us']:.1f}x PostgreSQL's "
              "index lookups" if "postgres" in eq else "")
           + f"; a put with one subspace runs at {pc['1']['ops'] / pc['0']['ops']:.2f}x "
           f"and with two at {pc['2']['ops'] / pc['0']['ops']:.2f}x the rate without."]
    return out


def chart_search(key, x):
    """p50 latency per search kind and system (log scale); a Markdown image."""
    name = "search_{}_{}x{}".format(*key)
    CHARTS.mkdir(parents=True, exist_ok=True)
    systems = [("Cairn subspace", lambda k: x["single"][k]["subspace"]),
               ("Cairn full scan", lambda k: x["single"][k]["full_scan"])]
    if "postgres" in x["single"]["equality"]:
        systems.append(("PostgreSQL B-tree", lambda k: x["single"][k]["postgres"]))
    if "duckdb" in x:
        systems.append(("DuckDB", lambda k: x["duckdb"][k]))
    kinds = [k for k, _ in SEARCH_KINDS]
    width = 0.8 / len(systems)
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for i, (label, get) in enumerate(systems):
        ax.bar([j + (i - (len(systems) - 1) / 2) * width for j in range(len(kinds))],
               [get(k)["p50_us"] for k in kinds], width, label=label)
    ax.set_yscale("log")
    ax.set_xticks(range(len(kinds)), kinds)
    ax.set_ylabel("p50 latency µs (log; lower is better)")
    ax.set_title(f"Search latency, {key[0]:,} objects")
    ax.legend()
    fig.tight_layout()
    fig.savefig(CHARTS / f"{name}.png", dpi=110)
    plt.close(fig)
    return f"![search latency](charts/{name}.png)\n"


def search_section(key, lines):
    """The hyperspace search section for one size (the newest run)."""
    x = lines[-1]
    objects, tservers, replicas = key
    has_pg = "postgres" in x["single"]["equality"]
    has_duck = "duckdb" in x
    header = ["search", "subspace p50 / p99 (µs)", "full scan p50 (µs)", "scan / subspace"]
    if has_pg:
        header += ["PostgreSQL p50 / p99 (µs)", "subspace / PostgreSQL"]
    if has_duck:
        header += ["DuckDB p50 (µs)", "subspace / DuckDB"]
    rows = []
    for kind, label in SEARCH_KINDS:
        e = x["single"][kind]
        sub, scan = e["subspace"], e["full_scan"]
        row = [label, f"{sub['p50_us']:,.0f} / {sub['p99_us']:,.0f}",
               f"{scan['p50_us']:,.0f}", f"{scan['p50_us'] / sub['p50_us']:.1f}"]
        if has_pg:
            p = e["postgres"]
            row += [f"{p['p50_us']:,.0f} / {p['p99_us']:,.0f}",
                    f"{sub['p50_us'] / p['p50_us']:.2f}"]
        if has_duck:
            d = x["duckdb"][kind]
            row += [f"{d['p50_us']:,.0f}", f"{sub['p50_us'] / d['p50_us']:.2f}"]
        rows.append(row)
    m = x["mixed"]
    mixed_rows = [["Cairn", fmt(m["cairn"]["all"]["ops"]),
                   f"{m['cairn']['search']['p50_us']:,.0f}",
                   f"{m['cairn']['put']['p50_us']:,.0f}"]]
    if "postgres" in m:
        mixed_rows.append(["PostgreSQL", fmt(m["postgres"]["all"]["ops"]),
                           f"{m['postgres']['search']['p50_us']:,.0f}",
                           f"{m['postgres']['put']['p50_us']:,.0f}"])
    pc = x["put_cost"]
    put_rows = [[n, fmt(pc[n]["ops"]), f"{pc[n]['p50_us']:,.0f}",
                 f"{pc[n]['ops'] / pc['0']['ops']:.2f}"] for n in ("0", "1", "2")]
    return (f"## Hyperspace search, {objects:,} objects, {tservers} tablet server(s), "
            f"replicas {replicas}\n\n"
            f"Run {x['date']}, git `{x['git']}`, {x['machine']['cpu']}. `bench/run search`: "
            "objects `(id, a, b, c, v)` with `a` about 10 objects per value, `b` uniform in "
            "`[0, objects)`, `c` one of 1,000 strings; subspaces `(a)` and `(b)` with "
            f"{x['regions']:,} regions each and `(c)` with 1,024, "
            f"{x.get('region_tablets') or 8} tablets each. Loaded "
            # Runs from 2026-11-29 on load with the bulk loader (chained bulk inserts).
            + ("with the bulk loader (each chunk chained into the subspaces by its point "
               "leader)" if x["date"] >= "2026-11-29" else "through chained single-row writes")
            + f" in {x['load_s']:,.0f} s"
            + (f" (PostgreSQL: `COPY` and three B-tree indexes in {x['pg_load_s']:,.0f} s)"
               if x.get("pg_load_s") else "")
            + (f"; measured once the server's background flushes and compactions had "
               f"settled ({x['settle_s']:,.0f} s)" if x.get("settle_s") is not None else "")
            + ". One client, 20 warm-up searches, then searches of random values (most "
            "of them read pages the block cache does not hold yet): the native "
            "client's `search`/`count` against the same "
            "predicates pushed into a scan of the table (full scan), PostgreSQL prepared "
            "statements and DuckDB (the same objects from Parquet, in a DuckDB table). "
            + (f"For reference, a primary-key `get` through the same client takes "
               f"{x['get']['p50_us']:,.0f} µs at p50. " if "get" in x else "")
            + "The regions come from the default cuts of an ordered axis (powers of two, "
            "evenly spaced in the exponent), not from a sample of the data, so they are "
            "uneven; each region's rows are sorted by its attribute (the region table's "
            "`__cell` key column), so a search reads only the matching rows of its "
            "region.\n\n"
            + table(header, rows) + "\n" + chart_search(key, x) + "\n"
            "Mixed workload, 16 clients, 50% equality search and 50% put of an existing "
            "object with new attribute values (PostgreSQL: `INSERT … ON CONFLICT DO "
            "UPDATE`):\n\n"
            + table(["system", "ops/s", "search p50 (µs)", "put p50 (µs)"], mixed_rows)
            + "\nThe price of chaining: single-row puts from 16 clients into empty tables "
            "with 0, 1 (`a`) and 2 (`a`, `b`) subspaces:\n\n"
            + table(["subspaces", "puts/s", "p50 (µs)", "vs none"], put_rows))


# ---- cost of TLS and authentication -------------------------------------------------

def tls_cost_rows(lines):
    """[(deployment, measure, off, on, on / off)] of one tls-cost run."""
    rows = []
    for d, measures in tlscost.summarize(lines).items():
        for label, v in measures.items():
            rows.append((d, label, v[False], v[True], v[True] / v[False]))
    return rows


def tls_cost_headline(sf, lines):
    """One sentence per deployment: what TLS and authentication cost on TPC-H and
    YCSB C."""
    out = []
    for d in tlscost.DEPLOYMENTS:
        rs = {label: r for dep, label, _, _, r in tls_cost_rows(lines) if dep == d}
        parts = []
        if "TPC-H sum of query medians (s)" in rs:
            parts.append(f"TPC-H SF {sf:g} query time × "
                         f"{rs['TPC-H sum of query medians (s)']:.2f} (sum of medians)")
        if "YCSB C (ops/s)" in rs:
            parts.append(f"YCSB C throughput × {rs['YCSB C (ops/s)']:.2f}")
        if parts:
            out.append(f"- Cost of TLS + authentication, {d}: " + ", ".join(parts)
                       + " (on / off).")
    return out


def tls_cost_section(sf, lines):
    """The tls-cost section: on / off per deployment and measure."""
    x0 = lines[0]
    rows = [[d, label, fmt(off), fmt(on), f"{r:.2f}"]
            for d, label, off, on, r in tls_cost_rows(lines)]
    ycsb = next((x for x in lines if x.get("bench") == "ycsb"), {})
    return (f"## Cost of TLS and authentication, TPC-H SF {sf:g} and YCSB C\n\n"
            + provenance(x0) + "\nEach deployment with security off (loopback defaults: no "
            "TLS, `trust`) and on (TLS on every connection, SCRAM-SHA-256 login over "
            "`sslmode=verify-full`, signed tokens on every tablet-server call), each on a "
            f"fresh server. YCSB: {ycsb.get('records', '?')} records, "
            f"{ycsb.get('operations', '?')} operations of workload C, "
            f"{ycsb.get('threads', '?')} threads. TPC-H: {x0.get('sf')} scale factor, "
            "queries whose answers matched DuckDB's in both settings. "
            "`bench/suite/tlscost.py` documents the method.\n\n"
            + table(["deployment", "measure", "off", "on", "on / off"], rows))


def pgbench_headline(clients, lines):
    """Headline sentence: Cairn tps / PostgreSQL tps."""
    tps = {x["system"]: x["tps"] for x in lines if x["status"] == "ok" and x.get("tps")}
    return [f"- pgbench TPC-B-like ({clients} clients, -M prepared): {c} / postgres tps "
            f"{tps[c] / tps['postgres']:.2f} ({tps[c]:,.0f} against {tps['postgres']:,.0f})."
            for c in CAIRNS if c in tps and "postgres" in tps]


def pgbench_section(clients, lines):
    """The pgbench section for one client count."""
    pg = next((x["tps"] for x in lines
               if x["system"] == "postgres" and x["status"] == "ok" and x.get("tps")), None)
    rows = []
    for x in lines:
        ratio = (f"{x['tps'] / pg:.2f}" if pg and x.get("tps") and x["status"] == "ok"
                 and x["system"] != "postgres" else "—")
        rows.append([x["system"], f"{x['tps']:,.0f}" if x.get("tps") else "—",
                     f"{x['latency_ms']:.2f}" if x.get("latency_ms") else "—",
                     f"{x['transactions']:,}",
                     f"{x['retried']:,}" if x.get("retried") is not None else "—", ratio,
                     x["status"] + (f": {x['error']}" if x.get("error") else "")])
    return (f"## pgbench TPC-B-like, {clients} clients\n\n" + provenance(lines[0])
            + "\n`bench/pgbench/tpcb.sql` with `pgbench -M prepared` (1 branch, 10 tellers, "
            "1,000 accounts; hot rows), the balances checked afterwards (status ok = "
            "sum(account) = sum(teller) = sum(branch) = sum(history.delta), no failed "
            "transaction). Both systems run each BEGIN…END as one transaction at their default "
            "isolation, READ COMMITTED: an UPDATE of a row another open transaction "
            "changed waits for it to end and re-reads the row, so the single branch row "
            "serializes the transactions. A transaction aborted with SQLSTATE 40001 would "
            "be retried by pgbench (`--max-tries`); \"retried\" counts them. "
            "`bench/suite/pgbench.py` documents the method.\n\n"
            + table(["system", "tps", "mean latency (ms)", "transactions", "retried",
                     "tps / postgres", "status"], rows))


# ---- scale-out ----------------------------------------------------------------------

def scaleout_by(lines):
    """{query: {servers: line}} over the queries that ran, and the baseline size."""
    by = defaultdict(dict)
    for x in lines:
        if x["query"] != "load" and x["status"] == "ok" and x.get("max_cpu_s") is not None:
            by[x["query"]][x["servers"]] = x
    return by, lines[0].get("baseline_servers", 1)


# Below this much CPU a query's figures are mostly /proc's 10 ms ticks.
SCALEOUT_MIN_CPU_S = 0.1


def scaleout_efficiency(by, base):
    """{(query, servers): efficiency}: the baseline's total CPU over (servers / baseline
    × the critical path), for every query the baseline ran with enough CPU to measure."""
    out = {}
    for q, recs in by.items():
        b = recs.get(base)
        if not b or b["total_cpu_s"] < SCALEOUT_MIN_CPU_S:
            continue
        for n, r in recs.items():
            if n != base and r["max_cpu_s"] > 0:
                out[q, n] = b["total_cpu_s"] / (n / base * r["max_cpu_s"])
    return out


def scaleout_headline(sf, lines):
    """Headline sentences: the efficiency at the largest size against the targets."""
    by, base = scaleout_by(lines)
    eff = scaleout_efficiency(by, base)
    sizes = sorted({n for _, n in eff})
    if not sizes:
        return [f"- Scale-out, TPC-H SF {sf:g}: no query used {SCALEOUT_MIN_CPU_S} s of CPU "
                "on one server, too little to measure (run it at SF 1)."]
    top = sizes[-1]
    at_top = {q: e for (q, n), e in eff.items() if n == top}
    g = geomean(list(at_top.values()))
    worst = min(at_top, key=at_top.get)
    met = g >= 0.75 and at_top[worst] >= 0.5
    return [f"- Scale-out, TPC-H SF {sf:g} ({len(at_top)} queries, CPU read from /proc): "
            f"efficiency at {top} tablet servers geomean {g:.2f} (target ≥ 0.75), lowest "
            f"{at_top[worst]:.2f} ({worst}; target ≥ 0.5): **{'met' if met else 'missed'}**."]


def scaleout_section(sf, lines):
    """The scale-out section: per query and cluster size, CPU, critical path, bytes
    shuffled and efficiency; the queries that do not scale; a chart."""
    by, base = scaleout_by(lines)
    eff = scaleout_efficiency(by, base)
    sizes = sorted({n for recs in by.values() for n in recs})
    queries = sorted(by, key=lambda q: int(q.lstrip("q")))
    header = ["query", f"total CPU at {base} (s)"]
    for n in sizes:
        if n != base:
            header += [f"{n}: total CPU (s)", f"{n}: critical path (s, process)",
                       f"{n}: shuffled (MB)", f"{n}: efficiency"]
    rows = []
    for q in queries:
        b = by[q].get(base)
        row = [q, f"{b['total_cpu_s']:.2f}" if b else "—"]
        for n in sizes:
            if n == base:
                continue
            r = by[q].get(n)
            if not r:
                row += ["—"] * 4
                continue
            dist = "" if r.get("distributed") else " (not distributed)"
            row += [f"{r['total_cpu_s']:.2f}", f"{r['max_cpu_s']:.2f} ({r['critical']})",
                    f"{r.get('shuffled_bytes', 0) / 2**20:.1f}{dist}",
                    f"{eff[q, n]:.2f}" if (q, n) in eff else "—"]
        rows.append(row)
    summary = []
    for n in sizes:
        if n == base:
            continue
        es = [e for (q, m), e in eff.items() if m == n]
        # How unevenly the tablet servers shared each query: the busiest over the mean.
        skew = []
        for q, m in eff:
            ts = [v for k, v in by[q][n]["cpu_s"].items() if k != "master"] if m == n else []
            if ts and sum(ts) > 0:
                skew.append(max(ts) / (sum(ts) / len(ts)))
        if es:
            summary.append([n, len(es), f"{geomean(es):.2f}", f"{min(es):.2f}",
                            sum(e < 0.5 for e in es),
                            f"{geomean(skew):.2f}" if skew else "—"])
    top = sizes[-1] if sizes else base
    small = [q for q in queries
             if by[q].get(base) and by[q][base]["total_cpu_s"] < SCALEOUT_MIN_CPU_S]
    slow = []
    for q in queries:
        e = eff.get((q, top))
        r = by[q].get(top)
        if e is None or e >= 0.5 or not r:
            continue
        cpu = r["cpu_s"]
        share = cpu.get("master", 0) / r["total_cpu_s"] if r["total_cpu_s"] else 0
        busiest = sorted((v for k, v in cpu.items() if k != "master"), reverse=True)
        why = []
        if r["critical"] == "master":
            why.append(f"the coordinator (master) does {share:.0%} of the work")
        elif len(busiest) > 1 and busiest[-1] < 0.5 * busiest[0]:
            why.append(f"uneven split: the busiest server {busiest[0]:.2f} s, the least "
                       f"busy {busiest[-1]:.2f} s")
        if not r.get("distributed"):
            why.append("it did not run distributed")
        added = r["total_cpu_s"] / by[q][base]["total_cpu_s"] if by[q].get(base) else 0
        if added > 1.3:
            why.append(f"distribution adds work: total CPU ×{added:.1f} the baseline's")
        slow.append(f"- {q}: efficiency {e:.2f}; " + ("; ".join(why) or "no single cause "
                                                       "stands out in these figures") + ".")
    path = None
    if eff:
        CHARTS.mkdir(parents=True, exist_ok=True)
        path = CHARTS / f"scaleout_sf{sf:g}.png"
        chart_scaleout(sf, eff, queries, [n for n in sizes if n != base], path)
    x0 = lines[0]
    return (f"## Scale-out, TPC-H SF {sf:g}\n\n" + provenance(x0)
            + f"\nOne `cairn master` (pgwire; it coordinates every query) and N `cairn "
            f"tserver` processes on this machine, replicas 1, every table in "
            f"{x0.get('partitions')} hash partitions, {x0.get('runs')} measured runs per "
            "query. CPU is user + system time from /proc, less each process's idle rate; "
            "critical path = the most CPU one process spent; efficiency = total CPU at "
            f"{base} / (N / {base} × critical path at N), for queries using at least "
            f"{SCALEOUT_MIN_CPU_S} s of CPU at {base}. Above 1 means distributing saved "
            "work: with one tablet server a query is not distributed, and the master reads "
            "every scanned row from the tablet server over RPC, while workers read their "
            "tablets in process. Shuffled = the network "
            "boundaries' `bytes_transferred` in EXPLAIN ANALYZE. With 2 cores, wall times "
            "are not a speed-up measure. `bench/suite/scaleout.py` documents the method.\n\n"
            + table(["tablet servers", "queries", "efficiency geomean", "lowest",
                     "below 0.5", "busiest / mean tablet server (geomean)"], summary) + "\n"
            + table(header, rows)
            + (f"\nNot counted, under {SCALEOUT_MIN_CPU_S} s of CPU at {base} (mostly "
               f"/proc's 10 ms ticks): {', '.join(small)}.\n" if small else "")
            + ("\nQueries below 0.5 at " + f"{top} servers:\n\n" + "\n".join(slow) + "\n"
               if slow else "")
            + (f"\n![scale-out efficiency](charts/{path.name})\n" if path else ""))


def chart_scaleout(sf, eff, queries, sizes, path):
    """Bars of the efficiency per query, one per cluster size, with the targets."""
    fig, ax = plt.subplots(figsize=(max(10, len(queries) * 0.6), 5))
    width = 0.8 / max(1, len(sizes))
    for i, n in enumerate(sizes):
        xs = [j + (i - (len(sizes) - 1) / 2) * width for j, q in enumerate(queries)
              if (q, n) in eff]
        ys = [eff[q, n] for q in queries if (q, n) in eff]
        ax.bar(xs, ys, width, label=f"{n} tablet servers", color=f"C{i}")
    ax.axhline(0.75, color="green", linestyle="--", linewidth=1, label="target geomean 0.75")
    ax.axhline(0.5, color="red", linestyle=":", linewidth=1, label="floor 0.5")
    ax.set_xticks(range(len(queries)), queries)
    ax.set_ylabel("scale-out efficiency")
    ax.set_title(f"TPC-H SF {sf:g}: scale-out efficiency per query (CPU; higher is better)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def fmt(v):
    """A number for a table cell: thousands separators for large ones."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.3f}"


def generate():
    """Writes REPORT.md and the charts; returns the report's path."""
    tp = newest(common.read_jsonl(common.RESULTS / "tpch.jsonl"), "sf", lambda x: x["run_id"])
    yc = newest(common.read_jsonl(common.RESULTS / "ycsb.jsonl"), "records",
                lambda x: x["run_id"])
    st = newest(common.read_jsonl(common.RESULTS / "storage.jsonl"), "sf",
                lambda x: (x["date"], x["git"]))
    tc = newest(common.read_jsonl(common.RESULTS / "tls-cost.jsonl"), "sf",
                lambda x: x["run_id"])
    pb = newest(common.read_jsonl(common.RESULTS / "pgbench.jsonl"), "clients",
                lambda x: x["run_id"])
    ro = newest(common.read_jsonl(common.RESULTS / "readonly.jsonl"), "rows",
                lambda x: x["date"])
    rs = newest(common.read_jsonl(common.RESULTS / "readonly-serve.jsonl"), "rows",
                lambda x: x["at"])
    se = defaultdict(list)
    for x in common.read_jsonl(common.RESULTS / "search.jsonl"):
        se[search_key(x)].append(x)
    head, body = [], []
    for sf, lines in tp.items():
        by = defaultdict(dict)
        for x in lines:
            if x["query"] != "load":
                by[x["system"]][x["query"]] = x
        head += tpch_headline(sf, by) + [
            f"- TPC-H SF {sf:g}: {x['system']} could not be set up: {x['error']}"
            for x in lines if x["query"] == "load" and x["status"] != "ok"]
        body.append(tpch_section(sf, lines))
    for records, lines in yc.items():
        head += ycsb_headline(records, lines)
        body.append(ycsb_section(records, lines))
    for clients, lines in pb.items():
        head += pgbench_headline(clients, lines)
        body.append(pgbench_section(clients, lines))
    for sf, lines in st.items():
        head += storage_headline(sf, lines)
        body.append(storage_section(sf, lines))
    ro_all = defaultdict(list)
    for x in common.read_jsonl(common.RESULTS / "readonly.jsonl"):
        ro_all[x["rows"]].append(x)
    for rows, lines in ro.items():
        head += readonly_headline(rows, lines)
        body.append(readonly_section(rows, lines,
                                     sorted(ro_all[rows], key=lambda x: x["date"])))
    for rows, lines in rs.items():
        x = lines[-1]
        head.append(f"- Read-only store served by `cairn local` ({rows:,} rows): get p50 "
                    f"{x['store_p50_us']:.0f} µs end to end against "
                    f"{x['table_p50_us']:.0f} µs for the same key in a Cairn table; "
                    f"16 clients {x['store16_ops']:,.0f} against {x['table16_ops']:,.0f} "
                    f"gets/s; push {x['push_s']:.1f} s, rollback "
                    f"{x['rollback_swap_ms']:.2f} ms on the server.")
        body.append(readonly_serve_section(rows, lines))
    for key, lines in sorted(se.items()):
        lines.sort(key=lambda x: x["run_id"])
        head += search_headline(key, lines[-1])
        body.append(search_section(key, lines))
    for sf, lines in tc.items():
        head += tls_cost_headline(sf, lines)
        body.append(tls_cost_section(sf, lines))
    so = newest(common.read_jsonl(common.RESULTS / "scaleout.jsonl"), "sf",
                lambda x: x["run_id"])
    for sf, lines in so.items():
        head += scaleout_headline(sf, lines)
        body.append(scaleout_section(sf, lines))
    md = ("# Cairn benchmark report\n\nGenerated by `bench/run report` from "
          "`bench/results/{tpch,ycsb,pgbench,storage,readonly,readonly-serve,search,tls-cost,"
          "scaleout}.jsonl` "
          "(newest run per "
          "suite and "
          "scale). "
          "Ratios are Cairn / peer: for times above 1 means Cairn is slower, for "
          "throughput below 1 means Cairn is slower.\n\n## Headline\n\n"
          + ("\n".join(head) if head else "No results yet.") + "\n\n"
          + "\n".join(body) + "\n## Settings\n\n" + SETTINGS)
    path = common.RESULTS / "REPORT.md"
    path.write_text(md)
    return path
