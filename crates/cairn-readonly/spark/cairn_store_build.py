"""Builds a Cairn read-only store's chunk files with Apache Spark.

`cairn store build` builds a store on one machine; a data set that outgrows one machine
is built by this job instead. For the same input and layout it writes the same bytes as
`cairn store build` (a test in the Cairn repository checks that), so a store built
either way is pushed and served the same way.

The job is the MapReduce job of the Voldemort read-only paper (§4.2.1):

- map: encode each row's key (Cairn's order-preserving key encoding) and value (Cairn's
  value codec), hash the key (MD5), and emit one record per replica in the key's
  preference list, keyed by (chunk number, 8-byte hash prefix, key);
- partition by chunk number (one Spark partition per chunk) and sort within each
  partition: `repartitionAndSortWithinPartitions`, Spark's external sort;
- reduce: each partition writes its chunk's `.index` and `.data` files; the driver
  then writes every node's `.metadata` with the files' sizes and MD5s.

Input: Parquet (a file or a folder). Output: OUTPUT/node-<id>/ for every node, on a
file system every executor and the driver can write to (local mode, or a shared mount).

    spark-submit cairn_store_build.py recs --input recs.parquet --key user_id \\
        --output /data/recs-build --nodes 3 --replication 2

Formats (see crates/cairn-readonly/src/format.rs and cairn-common's key.rs and
codec.rs): index entries are 8 bytes of MD5 prefix + u32 big-endian data offset; data
groups are u32 count, then per tuple u32 key length, u32 value length, key, value (all
big-endian); keys and values as above.
"""

import argparse
import decimal
import hashlib
import json
import os
import struct
import sys

FORMAT_VERSION = 1

# ---- types ---------------------------------------------------------------------------


def cairn_type(arrow_type):
    """The Cairn column type (as serialized in .metadata) of an Arrow type."""
    import pyarrow as pa
    t = arrow_type
    simple = [
        (pa.types.is_boolean, "Bool"), (pa.types.is_int8, "Int8"), (pa.types.is_int16, "Int16"),
        (pa.types.is_int32, "Int32"), (pa.types.is_int64, "Int64"),
        (pa.types.is_float32, "Float"), (pa.types.is_float64, "Double"),
        (pa.types.is_date32, "Date"),
    ]
    for test, name in simple:
        if test(t):
            return name
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return "String"
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return "Binary"
    if pa.types.is_timestamp(t) and t.unit == "us":
        return "Timestamp"
    if pa.types.is_decimal128(t):
        return {"Decimal": {"precision": t.precision, "scale": t.scale}}
    raise SystemExit(f"Arrow type {t} has no Cairn column type; cast it to one of BOOL, "
                     "INT8..INT64, FLOAT, DOUBLE, DECIMAL, STRING, BINARY, DATE, "
                     "TIMESTAMP (microseconds)")


def spark_expr(name, ctype):
    """The Spark SQL expression that yields the column as Python values the encoders
    take: days for dates, microseconds for timestamps."""
    q = "`" + name.replace("`", "``") + "`"
    if ctype == "Date":
        return f"unix_date({q}) AS {q}"
    if ctype == "Timestamp":
        return f"unix_micros({q}) AS {q}"
    return q


# ---- encodings (mirrors of cairn-common key.rs and codec.rs) ---------------------------


def unscaled(v, ctype):
    """A Python Decimal as its unscaled integer."""
    return int(decimal.Decimal(v).scaleb(ctype["Decimal"]["scale"]))


def encode_key_value(v, ctype, is_last, out):
    """Appends one key column's order-preserving encoding."""
    if v is None:
        raise ValueError("a key column is NULL: every row needs a key")
    if ctype == "Bool":
        out += bytes([1 if v else 0])
    elif ctype == "Int8":
        out += bytes([(v & 0xFF) ^ 0x80])
    elif ctype == "Int16":
        out += struct.pack(">H", (v & 0xFFFF) ^ 0x8000)
    elif ctype in ("Int32", "Date"):
        out += struct.pack(">I", (v & 0xFFFFFFFF) ^ 0x80000000)
    elif ctype in ("Int64", "Timestamp"):
        out += struct.pack(">Q", (v & 0xFFFFFFFFFFFFFFFF) ^ (1 << 63))
    elif ctype in ("Float", "Double"):
        bits, fmt_i, fmt_f, sign = ((32, ">I", ">f", 1 << 31) if ctype == "Float"
                                    else (64, ">Q", ">d", 1 << 63))
        b = struct.unpack(fmt_i, struct.pack(fmt_f, v))[0]
        e = (~b) & ((1 << bits) - 1) if b & sign else b | sign
        out += struct.pack(fmt_i, e)
    elif isinstance(ctype, dict):
        u = (unscaled(v, ctype) & ((1 << 128) - 1)) ^ (1 << 127)
        out += u.to_bytes(16, "big")
    elif ctype in ("String", "Binary"):
        raw = v.encode() if isinstance(v, str) else bytes(v)
        if is_last:
            out += raw
        else:
            out += raw.replace(b"\x00", b"\x00\x01") + b"\x00\x00"
    else:
        raise ValueError(f"unsupported key type {ctype}")


def put_value(v, ctype, out):
    """Appends one value in Cairn's value codec: a tag, then the payload little-endian."""
    if v is None:
        out += b"\x00"
    elif ctype == "Bool":
        out += bytes([1, 1 if v else 0])
    elif ctype == "Int8":
        out += bytes([2, v & 0xFF])
    elif ctype == "Int16":
        out += b"\x03" + struct.pack("<h", v)
    elif ctype == "Int32":
        out += b"\x04" + struct.pack("<i", v)
    elif ctype == "Int64":
        out += b"\x05" + struct.pack("<q", v)
    elif ctype == "Float":
        out += b"\x06" + struct.pack("<f", v)
    elif ctype == "Double":
        out += b"\x07" + struct.pack("<d", v)
    elif isinstance(ctype, dict):
        out += b"\x08" + (unscaled(v, ctype) & ((1 << 128) - 1)).to_bytes(16, "little")
    elif ctype in ("String", "Binary"):
        raw = v.encode() if isinstance(v, str) else bytes(v)
        out += (b"\x09" if ctype == "String" else b"\x0a") + struct.pack("<I", len(raw)) + raw
    elif ctype == "Date":
        out += b"\x0b" + struct.pack("<i", v)
    elif ctype == "Timestamp":
        out += b"\x0c" + struct.pack("<q", v)
    else:
        raise ValueError(f"unsupported value type {ctype}")


# ---- layout (mirror of layout.rs) ----------------------------------------------------


def preference_list(layout, primary):
    """[(partition, node)]: distinct nodes, new zones first (layout.rs)."""
    nodes = layout["partition_nodes"]
    p, want, zones = len(nodes), layout["replication"], layout["zones"]
    zone_count = len(set(zones.values()))
    out, used_zones = [], set()
    for pass_ in (0, 1):
        if pass_ == 0 and zone_count == 0:
            continue
        for step in range(p):
            if len(out) == want or (pass_ == 0 and len(used_zones) == zone_count):
                break
            part = (primary + step) % p
            node = nodes[part]
            if any(n == node for _, n in out):
                continue
            zone = zones.get(str(node))
            if pass_ == 0 and zone is not None and zone in used_zones:
                continue
            if zone is not None:
                used_zones.add(zone)
            out.append((part, node))
    return out


def chunks_of_node(layout, node):
    """[(partition, replica, chunk)] node stores, in file order."""
    out = []
    for part in range(len(layout["partition_nodes"])):
        for replica, (_, n) in enumerate(preference_list(layout, part)):
            if n == node:
                out += [(part, replica, c) for c in range(layout["chunks"])]
    return out


# ---- the job -------------------------------------------------------------------------


def main(argv=None):
    ap = argparse.ArgumentParser(description="Build a Cairn read-only store with Spark.")
    ap.add_argument("name")
    ap.add_argument("--input", required=True, help="a Parquet file or folder")
    ap.add_argument("--key", required=True, help="key columns, comma-separated")
    ap.add_argument("--value", help="value columns (default: every other column)")
    ap.add_argument("--output", required=True)
    ap.add_argument("--nodes", type=int, default=1)
    ap.add_argument("--partitions", type=int)
    ap.add_argument("--replication", type=int)
    ap.add_argument("--chunks", type=int, default=1)
    ap.add_argument("--zones", help="zone of each node, comma-separated in node order")
    ap.add_argument("--master", default="local[*]", help="Spark master (default local[*])")
    a = ap.parse_args(argv)

    import pyarrow.parquet as pq
    from pyspark.sql import SparkSession

    n_part = a.partitions or 8 * max(a.nodes, 1)
    rep = a.replication or min(max(a.nodes, 1), 2)
    if a.nodes < 1 or n_part < 1 or a.chunks < 1 or not 1 <= rep <= a.nodes:
        raise SystemExit("invalid layout: need nodes ≥ 1, partitions ≥ 1, chunks ≥ 1 and "
                         "1 ≤ replication ≤ nodes")
    zones = {}
    if a.zones:
        names = [z.strip() for z in a.zones.split(",")]
        if len(names) != a.nodes or any(not z for z in names):
            raise SystemExit("--zones needs one non-empty zone per node, in node order")
        zones = {str(i): z for i, z in enumerate(names)}
    layout = {"partition_nodes": [p % a.nodes for p in range(n_part)], "zones": zones,
              "replication": rep, "chunks": a.chunks}

    # The schema, from the Parquet footer (nullability as the file declares it).
    first = a.input
    if os.path.isdir(first):
        files = sorted(f for f in os.listdir(first) if f.endswith(".parquet"))
        if not files:
            raise SystemExit(f"no .parquet files in {first}")
        first = os.path.join(first, files[0])
    arrow_schema = pq.read_schema(first)
    key_names = [k.strip() for k in a.key.split(",")]
    value_names = ([v.strip() for v in a.value.split(",")] if a.value
                   else [f.name for f in arrow_schema if f.name not in key_names])

    def column(name, is_key):
        if name not in arrow_schema.names:
            raise SystemExit(f"the input has no column '{name}'")
        f = arrow_schema.field(name)
        return {"name": name, "data_type": cairn_type(f.type),
                "nullable": (not is_key) and f.nullable}

    schema = {"key": [column(k, True) for k in key_names],
              "value": [column(v, False) for v in value_names]}
    key_types = [c["data_type"] for c in schema["key"]]
    value_types = [c["data_type"] for c in schema["value"]]
    n_chunks_total = n_part * rep * a.chunks
    prefs = [preference_list(layout, p) for p in range(n_part)]

    spark = SparkSession.builder.master(a.master).appName(f"cairn-store-build-{a.name}") \
        .config("spark.ui.enabled", "false").getOrCreate()
    try:
        df = spark.read.parquet(a.input).selectExpr(
            *[spark_expr(c["name"], c["data_type"]) for c in schema["key"] + schema["value"]])
        nk = len(key_types)

        def to_records(row):
            k = bytearray()
            for i, t in enumerate(key_types):
                encode_key_value(row[i], t, i == nk - 1, k)
            v = bytearray()
            for i, t in enumerate(value_types):
                put_value(row[nk + i], t, v)
            md5 = hashlib.md5(bytes(k)).digest()
            prefix = int.from_bytes(md5[:8], "big")
            part = (prefix * n_part) >> 64
            chunk = int.from_bytes(md5[8:12], "big") % a.chunks
            for replica in range(len(prefs[part])):
                number = (part * rep + replica) * a.chunks + chunk
                yield ((number, md5[:8], bytes(k)), bytes(v))

        out_root = os.path.abspath(a.output)
        for node in sorted(set(layout["partition_nodes"])):
            d = os.path.join(out_root, f"node-{node}")
            if os.path.isdir(d) and os.listdir(d):
                raise SystemExit(f"output folder {d} is not empty")
            os.makedirs(d, exist_ok=True)
        # Chunk number → (stem, node).
        chunk_info = {}
        for part in range(n_part):
            for replica, (_, node) in enumerate(prefs[part]):
                for c in range(a.chunks):
                    number = (part * rep + replica) * a.chunks + c
                    chunk_info[number] = (f"{part}_{replica}_{c}", node)

        class HashedFile:
            """A chunk file written as a stream, with its MD5 and size."""

            def __init__(self, path):
                self.name = os.path.basename(path)
                self.f = open(path, "wb")
                self.md5 = hashlib.md5()
                self.bytes = 0

            def write(self, b):
                self.f.write(b)
                self.md5.update(b)
                self.bytes += len(b)

            def close(self):
                self.f.flush()
                os.fsync(self.f.fileno())
                self.f.close()
                return {"name": self.name, "bytes": self.bytes, "md5": self.md5.hexdigest()}

        def write_chunk(number, records):
            stem, node = chunk_info[number]
            d = os.path.join(out_root, f"node-{node}")
            index = HashedFile(os.path.join(d, f"{stem}.index"))
            data = HashedFile(os.path.join(d, f"{stem}.data"))
            rows = 0

            def flush(prefix, group):
                if data.bytes > 0xFFFFFFFF:
                    raise ValueError(f"chunk {stem} holds more than 4 GiB: use more --chunks")
                index.write(prefix + struct.pack(">I", data.bytes))
                buf = bytearray(struct.pack(">I", len(group)))
                for k, v in group:
                    buf += struct.pack(">II", len(k), len(v)) + k + v
                data.write(bytes(buf))

            cur, group = None, []
            for (_, prefix, k), v in records:
                if cur is not None and prefix != cur:
                    flush(cur, group)
                    group = []
                if group and group[-1][0] == k:
                    raise ValueError(f"duplicate key (encoded 0x{k.hex()}) in the input")
                cur = prefix
                group.append((k, v))
                rows += 1
            if group:
                flush(cur, group)
            return (number, ([index.close(), data.close()], rows))

        written = dict(
            df.rdd.flatMap(to_records)
            .repartitionAndSortWithinPartitions(
                numPartitions=n_chunks_total,
                partitionFunc=lambda key: key[0],
                keyfunc=lambda key: key)
            .mapPartitionsWithIndex(lambda i, it: [write_chunk(i, it)])
            .collect())
    finally:
        spark.stop()

    for node in sorted(set(layout["partition_nodes"])):
        files, rows = [], 0
        for part, replica, c in chunks_of_node(layout, node):
            number = (part * rep + replica) * a.chunks + c
            entries, n = written[number]
            files += entries
            rows += n
        checksum = hashlib.md5(b"".join(bytes.fromhex(f["md5"]) for f in files)).hexdigest()
        meta = {"format_version": FORMAT_VERSION, "store": a.name, "node": node,
                "schema": schema, "layout": layout, "rows": rows, "files": files,
                "checksum": checksum}
        path = os.path.join(out_root, f"node-{node}", ".metadata")
        with open(path, "w", encoding="utf-8") as f:
            f.write(json.dumps(meta, indent=2, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
    total = sum(n for _, n in written.values())
    print(f"built store '{a.name}' with Spark: {total} tuples in {n_chunks_total} chunks on "
          f"{a.nodes} node(s) under {out_root}")


if __name__ == "__main__":
    sys.exit(main())
