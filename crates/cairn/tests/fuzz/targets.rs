//! Fuzz targets: each takes arbitrary bytes and feeds them to one reader of untrusted
//! input. A target passes if it returns (an `Err` is fine); a panic, an abort or a hang
//! is a bug. The same functions run under libFuzzer (`fuzz/`, `cargo fuzz run
//! <target>`, by hand) and under the time-bounded mutation loop of `tests/fuzz.rs`
//! (in CI).

use std::sync::OnceLock;

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_proto as pb;

/// The schema writes and keys are decoded against: a key of two columns and one of
/// each common type.
pub fn schema() -> &'static Schema {
    static S: OnceLock<Schema> = OnceLock::new();
    S.get_or_init(|| {
        Schema::new(
            vec![
                ColumnSpec::new("id", DataType::Int64),
                ColumnSpec::new("name", DataType::String),
                ColumnSpec::new("v", DataType::Double).nullable(),
                ColumnSpec::new("b", DataType::Binary).nullable(),
                ColumnSpec::new("ok", DataType::Bool).nullable(),
            ],
            &["id", "name"],
        )
        .expect("a valid schema")
    })
}

/// SQL text through Cairn's parser (its DDL, UPSERT, AS OF, COPY, users and grants,
/// and everything handed on to DataFusion's parser).
pub fn sql_parser(data: &[u8]) {
    if let Ok(sql) = std::str::from_utf8(data) {
        let _ = cairn_sql::parser::parse_sql(sql);
    }
}

/// Order-preserving key decoding, and re-encoding what decodes.
pub fn key_codec(data: &[u8]) {
    let s = schema();
    if let Ok(values) = cairn_common::key::decode_row_key(s, data) {
        let again = cairn_common::key::encode_row_key(s, &values).expect("decoded keys encode");
        assert_eq!(again, data, "a decoded key must encode to the same bytes");
    }
    let types = [&DataType::String, &DataType::Int32, &DataType::Binary];
    let _ = cairn_common::key::decode_values(&types, data);
}

/// The WAL reader: the bytes as the only segment of a log, opened and read whole.
pub fn wal_reader(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join(cairn_wal::segment_file_name(1));
    std::fs::write(&path, data).expect("write the segment");
    let opts = cairn_wal::LogOptions {
        fsync: cairn_wal::FsyncPolicy::Never,
        ..Default::default()
    };
    if let Ok(log) = cairn_wal::Log::open(dir.path(), opts)
        && let (Some(first), Some(last)) = (log.first_index(), log.last_index())
    {
        for i in first..=last.min(first + 10_000) {
            let _ = log.read(i);
        }
    }
}

/// The delta-file reader (REDO/UNDO files of DiskRowSets). The checksum is made to
/// match so the parser behind it is reached.
pub fn delta_reader(data: &[u8]) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let path = dir.path().join("d.delta");
    std::fs::write(&path, data).expect("write the file");
    let _ = cairn_tablet::delta::DeltaFile::open(&path, "d", crc32c::crc32c(data));
}

/// A write request's rows: op kinds and an Arrow IPC stream, decoded against the
/// table's schema as the tablet server does. The first byte says how many op kinds
/// come first.
pub fn write_batch(data: &[u8]) {
    let Some((&n, rest)) = data.split_first() else {
        return;
    };
    let n = (n as usize).min(rest.len());
    let batch = pb::RowBatch {
        op_kinds: rest[..n].to_vec().into(),
        arrow_ipc: rest[n..].to_vec().into(),
        conditions: vec![],
    };
    let _ = cairn_tserver::convert::row_ops(schema(), &[batch], 1 << 20);
    let _ = cairn_tserver::convert::decode_ipc(&rest[n..]);
}

/// Valid inputs to start each target's mutations from.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    match target {
        "sql_parser" => [
            "SELECT a, count(*) FROM t WHERE b > 1 AND c LIKE 'x%' GROUP BY a ORDER BY 2 DESC LIMIT 10",
            "CREATE TABLE m (h TEXT, ts TIMESTAMP, v DOUBLE, PRIMARY KEY (h, ts)) PARTITION BY HASH (h) PARTITIONS 4, RANGE (ts) (PARTITION VALUES < '2024-01-01') WITH (replicas = 3)",
            "UPSERT INTO t (a, b) VALUES (1, 'x'), (2, NULL)",
            "INSERT INTO t VALUES (1) ON CONFLICT DO NOTHING",
            "UPDATE t SET c = c + 1 WHERE a = $1",
            "SELECT * FROM t AS OF now() - interval '5 minutes'",
            "COPY t (a, b) FROM '/tmp/x.csv' WITH (FORMAT csv, HEADER true, DELIMITER ';')",
            "ALTER TABLE t ADD COLUMN d BIGINT, DROP COLUMN e, RENAME COLUMN f TO g",
            "CREATE USER ann WITH PASSWORD 'x' SUPERUSER; GRANT SELECT, INSERT ON t TO ann",
            "REVOKE ALL ON ALL TABLES IN SCHEMA public FROM ann; DROP USER IF EXISTS ann",
            "WITH x AS (SELECT 1 AS a) SELECT * FROM x JOIN t USING (a) WHERE EXISTS (SELECT 1)",
        ]
        .iter()
        .map(|s| s.as_bytes().to_vec())
        .collect(),
        "key_codec" => {
            let s = schema();
            [(0i64, ""), (-1, "a\0b"), (i64::MAX, "ünïcode"), (i64::MIN, "\0\0")]
                .iter()
                .map(|(id, name)| {
                    cairn_common::key::encode_row_key(
                        s,
                        &[
                            Value::Int64(*id),
                            Value::String(name.to_string()),
                            Value::Null,
                            Value::Null,
                            Value::Null,
                        ],
                    )
                    .expect("encodes")
                })
                .collect()
        }
        "wal_reader" => {
            let dir = tempfile::tempdir().expect("a temporary directory");
            let opts = cairn_wal::LogOptions {
                fsync: cairn_wal::FsyncPolicy::Never,
                ..Default::default()
            };
            let mut log = cairn_wal::Log::open(dir.path(), opts).expect("open");
            for i in 1..=4u64 {
                log.append(i, &vec![i as u8; 10 * i as usize]).expect("append");
            }
            drop(log);
            vec![std::fs::read(dir.path().join(cairn_wal::segment_file_name(1))).expect("read")]
        }
        "delta_reader" => {
            use cairn_common::HybridTime;
            use cairn_tablet::delta::DeltaEntry;
            use cairn_tablet::ops::RowChange;
            let dir = tempfile::tempdir().expect("a temporary directory");
            let path = dir.path().join("d.delta");
            let entries = vec![
                DeltaEntry {
                    ordinal: 0,
                    ts: HybridTime(5),
                    change: RowChange::Update(vec![(2, Value::Double(1.5))]),
                },
                DeltaEntry {
                    ordinal: 3,
                    ts: HybridTime(7),
                    change: RowChange::Delete,
                },
                DeltaEntry {
                    ordinal: 3,
                    ts: HybridTime(9),
                    change: RowChange::Reinsert(vec![
                        (0, Value::Int64(3)),
                        (1, Value::String("x".into())),
                    ]),
                },
            ];
            cairn_tablet::delta::write_delta_file(&path, &entries).expect("write");
            vec![std::fs::read(&path).expect("read")]
        }
        "write_batch" => {
            let s = schema();
            let ops = [
                cairn_client::Operation::insert(vec![
                    Value::Int64(1),
                    Value::String("a".into()),
                    Value::Double(2.0),
                    Value::Binary(vec![1, 2]),
                    Value::Bool(true),
                ]),
                cairn_client::Operation::delete(s, &[Value::Int64(2), Value::String("b".into())])
                    .expect("a key"),
            ];
            let w = cairn_client::encode_write(s, ops.iter()).expect("encodes");
            w.batches
                .iter()
                .map(|b| {
                    let mut v = vec![b.op_kinds.len() as u8];
                    v.extend_from_slice(&b.op_kinds);
                    v.extend_from_slice(&b.arrow_ipc);
                    v
                })
                .collect()
        }
        _ => vec![],
    }
}

/// A fuzz target: takes any bytes, must not panic.
pub type Target = fn(&[u8]);

/// Every target, by name.
pub const TARGETS: [(&str, Target); 5] = [
    ("sql_parser", sql_parser),
    ("key_codec", key_codec),
    ("wal_reader", wal_reader),
    ("delta_reader", delta_reader),
    ("write_batch", write_batch),
];
