//! Hostile input, for a fixed time per target (CI runs each for
//! `CAIRN_FUZZ_SECS`, default 3 s; run longer by hand, or under libFuzzer with
//! `fuzz/`):
//!
//! - the byte-level targets of `fuzz/targets.rs` (SQL parser, key codec, WAL reader,
//!   delta-file reader, write-batch IPC decoding), each fed its seeds and then
//!   mutations of them (bit flips, byte changes, cuts, duplications, splices, random
//!   bytes). A panic fails the test and prints the input as hex: add it to
//!   [`REGRESSIONS`] when fixing it.
//! - every protobuf request handler of a live tablet server and master: mutated
//!   encodings of valid requests sent as raw gRPC messages. The servers must answer
//!   each (an error is fine) and still serve reads and writes afterwards.

#[path = "common/mod.rs"]
mod common;
#[path = "fuzz/targets.rs"]
mod targets;

use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use prost::Message;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// Requests that once crashed a server (path, hex of the message), sent first.
const RPC_REGRESSIONS: &[(&str, &str)] = &[
    // A Write whose Arrow IPC declared a 167 GB body: arrow allocated it before reading
    // and the process aborted. IPC framing is now checked first.
    (
        "/cairn.TabletServer/Write",
        "0a1061643366303335346564373230653733128e060a0100128806fffffffff80000001000000000000a000c000a00090004000a00000010000000000104000800080000000400080000000400000003000000700000003400000004000000acffffff100000001800000000000102140000009cffffff400000000000000100000000010000006e000000d8ffffff180000000c000000000001051000000000000000040004000400000001000000760000001000140010000e000f00040000000800100000001800000020000000000001021c00000008000c0004000b00080000004000000000000001000000000200000069640000000000000000000000000000000000000000000000000000000000000000000000000000fffffffff8000000100000000c001a0018001700040008000c000000200000000001000027000000000000000000000304000a0018000c00080004000a0000004c000000100000000100000000000000000000000300000001000000000000000000000000000000",
    ),
];

/// Inputs that once crashed a target (target, hex), kept as regression tests.
const REGRESSIONS: &[(&str, &str)] = &[
    // arrow's IPC reader panicked on a buffer offset that overflows ("the offset of
    // the new Buffer cannot exceed the existing length"); the tablet server now
    // answers INVALID_ARGUMENT.
    (
        "write_batch",
        "0105ffffffffb80000001000000000000a000c000a00090004000a000000100000000001040008000800000004000800000004000000020000004400000004000000d4ffffff180000000c0000000000010510000000000000000400040004000000040000006e616d65000000001000140010000e000f00040000000800100000001800000020000000000001021c00000008000c0004000b0008000000400000000000000100000000020000006964000000000000000000000000000000000000fffffffff8000000100000000c001a0018001700040008000c00000020000000c000000000000000000000000200000304000a0018000c00080004000a0000003c00000010000000010000000000000000000000020000000100000000000000000000000000000001000000000000000000000000000000000000000500000000000000000000000000000000000000000000000000000008000000000000004000000000000000000000000000000040000000000000000800000000000080000000000000000100000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000020000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000001000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000062000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000000ffffffff00000000",
    ),
];

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// One mutation of `input` (or of a splice with `other`).
fn mutate(rng: &mut StdRng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut v = input.to_vec();
    let rounds = rng.random_range(1..=4);
    for _ in 0..rounds {
        match rng.random_range(0..8) {
            0 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v[i] ^= 1 << rng.random_range(0..8);
            }
            1 if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v[i] = *[0u8, 0xff, 0x7f, 0x80, b'\'', b'(', b';', b'$']
                    .get(rng.random_range(0..8))
                    .unwrap_or(&0);
            }
            2 if !v.is_empty() => {
                let cut = rng.random_range(0..v.len());
                v.truncate(cut);
            }
            3 if !v.is_empty() => {
                let a = rng.random_range(0..v.len());
                let b = rng.random_range(a..=v.len());
                let piece = v[a..b].to_vec();
                let at = rng.random_range(0..=v.len());
                v.splice(at..at, piece);
            }
            4 if !other.is_empty() => {
                let a = rng.random_range(0..other.len());
                let at = rng.random_range(0..=v.len());
                v.splice(at..at, other[a..].iter().copied().take(64));
            }
            5 => {
                let at = rng.random_range(0..=v.len());
                let n = rng.random_range(1..16);
                let bytes: Vec<u8> = (0..n).map(|_| rng.random()).collect();
                v.splice(at..at, bytes);
            }
            6 if v.len() >= 4 => {
                // Lengths and counts are often little-endian u32s: make one huge.
                let i = rng.random_range(0..v.len() - 3);
                v[i..i + 4].copy_from_slice(&u32::MAX.to_le_bytes());
            }
            _ if !v.is_empty() => {
                let i = rng.random_range(0..v.len());
                v.remove(i);
            }
            _ => v.push(rng.random()),
        }
    }
    v
}

/// Runs `f` on seeds and mutations for `budget`; panics with the failing input.
fn fuzz(name: &str, f: fn(&[u8]), seeds: Vec<Vec<u8>>, budget: Duration) -> usize {
    let mut rng = StdRng::seed_from_u64(
        std::env::var("CAIRN_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(rand::random),
    );
    let mut corpus = seeds;
    if corpus.is_empty() {
        corpus.push(vec![]);
    }
    let start = Instant::now();
    let mut runs = 0usize;
    let mut failure = None;
    while start.elapsed() < budget {
        let a = rng.random_range(0..corpus.len());
        let b = rng.random_range(0..corpus.len());
        let input = if runs < corpus.len() {
            corpus[runs].clone()
        } else {
            mutate(&mut rng, &corpus[a], &corpus[b])
        };
        runs += 1;
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(|| f(&input))) {
            let msg = p
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            failure = Some((input, msg));
            break;
        }
        // Keep a few mutants as new starting points.
        if corpus.len() < 256 && rng.random_ratio(1, 50) {
            corpus.push(input);
        }
    }
    if let Some((input, msg)) = failure {
        panic!(
            "fuzz target {name} panicked ({msg}) on input {}",
            hex(&input)
        );
    }
    runs
}

#[test]
fn byte_level_targets_survive_mutated_input() {
    for (name, hex_input) in REGRESSIONS {
        let f = targets::TARGETS
            .iter()
            .find(|(n, _)| n == name)
            .expect("a known target")
            .1;
        f(&unhex(hex_input));
    }
    for (name, f) in targets::TARGETS {
        let runs = fuzz(name, f, targets::seeds(name), common::fuzz_budget());
        eprintln!("fuzz target {name}: {runs} inputs");
        assert!(runs > 0);
    }
}

/// Mutated protobuf requests to every tablet-server and master RPC of a live cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rpc_handlers_survive_malformed_requests() {
    use cairn_proto as pb;
    let cl = common::InProc::start(1, Duration::from_secs(300)).await;
    let c = cl.client().await;
    c.create_table(common::table_spec("t", 2, 1)).await.unwrap();
    let t = c.open_table("t").await.unwrap();
    common::insert_range(&c, &t, 0..100).await;
    let tablet = c.table_locations(&t, true).await.unwrap()[0]
        .tablet_id
        .clone();
    let ts_channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cl.ts_addrs[0]))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let m_channel = tonic::transport::Endpoint::from_shared(format!("http://{}", cl.master_addr))
        .unwrap()
        .connect()
        .await
        .unwrap();
    let write = c.open_table("t").await.unwrap();
    let enc = cairn_client::encode_write(&write.schema, [common::row(5)].iter()).unwrap();
    // (service path, a valid request) for each RPC; ids point at a tablet that does
    // not exist, so mutations that still decode exercise the handlers, not deletions.
    let fake = "fuzz-tablet".to_string();
    let seeds: Vec<(&str, Vec<u8>)> = vec![
        (
            "/cairn.TabletServer/Write",
            pb::WriteRequest {
                tablet_id: tablet.clone(),
                batches: enc.batches.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/TxnControl",
            pb::TxnControlRequest {
                tablet_id: tablet.clone(),
                txn_id: 7,
                action: pb::TxnAction::TxnAbort as i32,
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/BulkInsert",
            pb::BulkInsertRequest {
                tablet_id: fake.clone(),
                arrow_ipc: enc.batches[0].arrow_ipc.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/Scan",
            pb::ScanRequest {
                tablet_id: tablet.clone(),
                batch_rows: 10,
                predicates_json: b"[]".to_vec().into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/ScannerKeepAlive",
            pb::ScannerKeepAliveRequest {
                scanner_id: "x".into(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/CreateTablet",
            pb::CreateTabletRequest {
                tablet_id: fake.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/DeleteTablet",
            pb::DeleteTabletRequest {
                tablet_id: fake.clone(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/ListTablets",
            pb::ListTabletsRequest {}.encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/Checksum",
            pb::ChecksumRequest {
                tablet_id: fake.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/ChangeConfig",
            pb::ChangeConfigRequest {
                tablet_id: fake.clone(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/StepDown",
            pb::StepDownRequest {
                tablet_id: fake.clone(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/SafeIndex",
            pb::SafeIndexRequest {
                tablet_id: fake.clone(),
                timestamp: 1,
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/AlterSchema",
            pb::AlterSchemaRequest {
                tablet_id: fake.clone(),
                steps_json: b"[]".to_vec().into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.TabletServer/FlushTablet",
            pb::FlushTabletRequest {
                tablet_id: fake.clone(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Consensus/Vote",
            pb::RaftRequest {
                group_id: fake.clone(),
                payload: vec![1, 2, 3].into(),
            }
            .encode_to_vec(),
        ),
        // Raft messages go to a group that does not exist (and are never spliced with
        // other requests, which name the live tablet): a forged message to a live
        // group is a Byzantine peer, which Raft does not tolerate; only holders of a
        // cluster certificate may send them (docs/security.md).
        (
            "/cairn.Consensus/AppendEntries",
            pb::RaftRequest {
                group_id: fake.clone(),
                payload: vec![0; 16].into(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/CreateTable",
            pb::CreateTableRequest {
                name: "fz".into(),
                schema_json: b"{}".to_vec().into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/AlterTable",
            pb::AlterTableRequest {
                name: "nope".into(),
                steps_json: b"[]".to_vec().into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/DropTable",
            pb::DropTableRequest {
                name: "nope".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/GetTable",
            pb::GetTableRequest { name: "t".into() }.encode_to_vec(),
        ),
        (
            "/cairn.Master/GetTableLocations",
            pb::GetTableLocationsRequest {
                name: "t".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/Heartbeat",
            pb::HeartbeatRequest {
                node_id: 77,
                addr: "127.0.0.1:1".into(),
                ..Default::default()
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/Authenticate",
            pb::AuthenticateRequest {
                user: "cairn".into(),
                password: "x".into(),
            }
            .encode_to_vec(),
        ),
        (
            "/cairn.Master/UserDdl",
            pb::UserDdlRequest {
                op_json: br#"{"Drop":{"name":"nobody","if_exists":true}}"#.to_vec().into(),
            }
            .encode_to_vec(),
        ),
    ];
    let seed = std::env::var("CAIRN_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let trace = std::env::var("CAIRN_FUZZ_TRACE").is_ok();
    let deadline = Instant::now() + common::fuzz_budget();
    let mut sent = 0usize;
    let mut first: Vec<(&str, Vec<u8>)> = RPC_REGRESSIONS
        .iter()
        .map(|(p, h)| (*p, unhex(h)))
        .collect();
    while Instant::now() < deadline {
        for (path, seed) in &seeds {
            // Never spliced with other requests: Raft messages (a live group's id would
            // make a Byzantine peer), table DDL (a live table's name would make a
            // legitimate DROP) and the tablet administration calls that change or remove
            // a tablet (the live tablet's id, spliced in from a Write, would make a
            // legitimate DeleteTablet — seed 9307190940066361341 did exactly that).
            let other = if path.starts_with("/cairn.Consensus")
                || path.ends_with("Table") && !path.ends_with("GetTable")
                || TABLET_ADMIN.iter().any(|a| path.ends_with(a))
            {
                seed
            } else {
                &seeds[rng.random_range(0..seeds.len())].1
            };
            let (path, body) = match first.pop() {
                Some(r) => r,
                None => (*path, mutate(&mut rng, seed, other)),
            };
            if trace {
                eprintln!("{path} {}", hex(&body));
            }
            let channel = if path.starts_with("/cairn.Master") {
                m_channel.clone()
            } else {
                ts_channel.clone()
            };
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.expect("the server accepts calls");
            let mut req = tonic::Request::new(body);
            req.set_timeout(Duration::from_secs(5));
            let r: Result<tonic::Response<Vec<u8>>, tonic::Status> =
                grpc.unary(req, path.parse().unwrap(), RawCodec).await;
            if let Err(s) = &r {
                // Any answer is fine; a transport failure means the server died.
                assert_ne!(s.code(), tonic::Code::Unknown, "{path}: {s:?}");
            }
            sent += 1;
        }
    }
    eprintln!("sent {sent} mutated requests");
    // Everything still works. (Mutated writes to the live tablet are legitimate
    // requests: they may have added or deleted rows, so the count is taken now.)
    let before = c.scan(&t).count().await.unwrap();
    common::insert_range(&c, &t, 1_000_000_000..1_000_000_010).await;
    assert_eq!(c.scan(&t).count().await.unwrap(), before + 10);
}

/// Tablet-server calls that create, reconfigure, alter or delete a tablet: a mutant
/// that names the live tablet is a legitimate request that may remove it.
const TABLET_ADMIN: &[&str] = &[
    "/DeleteTablet",
    "/CreateTablet",
    "/ChangeConfig",
    "/AlterSchema",
];

/// Sends and receives raw message bytes.
#[derive(Clone, Default)]
struct RawCodec;

impl tonic::codec::Codec for RawCodec {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = RawCodec;
    type Decoder = RawCodec;
    fn encoder(&mut self) -> Self::Encoder {
        RawCodec
    }
    fn decoder(&mut self) -> Self::Decoder {
        RawCodec
    }
}

impl tonic::codec::Encoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn encode(
        &mut self,
        item: Vec<u8>,
        dst: &mut tonic::codec::EncodeBuf<'_>,
    ) -> Result<(), tonic::Status> {
        use bytes::BufMut;
        dst.put_slice(&item);
        Ok(())
    }
}

impl tonic::codec::Decoder for RawCodec {
    type Item = Vec<u8>;
    type Error = tonic::Status;
    fn decode(
        &mut self,
        src: &mut tonic::codec::DecodeBuf<'_>,
    ) -> Result<Option<Vec<u8>>, tonic::Status> {
        use bytes::Buf;
        let mut v = vec![0; src.remaining()];
        src.copy_to_slice(&mut v);
        Ok(Some(v))
    }
}
