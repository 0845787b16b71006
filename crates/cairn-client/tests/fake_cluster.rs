//! The client against in-process fake masters and tablet servers: leader discovery,
//! routing with leader hints and stale locations, write sessions, and scans with
//! snapshot pinning, pruning, limits and mid-scan failures.
//!
//! The fakes share one in-memory "world" (so every replica has the same rows, like a
//! replicated tablet) and record what they were asked, so tests can check the wire
//! behaviour.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use arrow::array::{Array, Int64Array, RecordBatch};
use arrow::ipc::writer::StreamWriter;
use cairn_client::{
    Client, ClientError, ClientOptions, CreateTableSpec, FlushMode, Operation, ReadMode, decode_ipc,
};
use cairn_common::key::encode_row_key;
use cairn_common::types::array_from_values;
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, Partition, PartitionSchema, Schema,
    SchemaMeta, Value,
};
use cairn_proto::master_server::{Master, MasterServer};
use cairn_proto::tablet_server_server::{TabletServer, TabletServerServer};
use cairn_proto::*;
use futures::StreamExt;
use parking_lot::Mutex;
use tonic::{Request, Response, Status};

/// A tablet's rows by encoded primary key.
type TabletRows = BTreeMap<Vec<u8>, Vec<Value>>;
type Rpc<T> = Result<Response<T>, Status>;

struct TableDef {
    id: String,
    name: String,
    schema: Schema,
    schema_json: Vec<u8>,
    ps: PartitionSchema,
    replicas: u32,
    tablets: Vec<(String, Partition)>,
}

#[derive(Debug, Clone)]
struct ScanOpen {
    tablet: String,
    server: String,
    mode: i32,
    ts: u64,
    /// The snapshot the request asked for (0: the server picks) and the timestamp
    /// the client propagated.
    requested: u64,
    propagated: u64,
    lower: Vec<u8>,
}

#[derive(Default)]
struct World {
    table: Mutex<Option<TableDef>>,
    rows: Mutex<HashMap<String, TabletRows>>,
    clock: AtomicU64,
    leader_master: Mutex<String>,
    ts_addrs: Mutex<Vec<String>>,
    dead_addr: Mutex<String>,
    /// For this many location fetches, tablet t0's leader is claimed to be the dead
    /// address.
    bad_leader_fetches: AtomicUsize,
    location_calls: AtomicUsize,
    /// The next N scanner continuations fail with UNAVAILABLE (scanner lost).
    fail_continuations: AtomicUsize,
    scan_opens: Mutex<Vec<ScanOpen>>,
    writes: Mutex<Vec<(String, String)>>,
}

impl World {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(10, Ordering::SeqCst) + 10
    }
}

fn not_leader(hint: &str) -> Status {
    let mut s = Status::failed_precondition("not the leader");
    s.metadata_mut()
        .insert(LEADER_ADDR_HEADER, hint.parse().unwrap());
    s
}

// ---------------------------------------------------------------- fake master

struct FakeMaster {
    world: Arc<World>,
    addr: String,
}

impl FakeMaster {
    fn check_leader(&self) -> Result<(), Status> {
        let leader = self.world.leader_master.lock().clone();
        if leader != self.addr {
            return Err(not_leader(&leader));
        }
        Ok(())
    }
}

#[tonic::async_trait]
impl Master for FakeMaster {
    async fn create_table(&self, r: Request<CreateTableRequest>) -> Rpc<CreateTableResponse> {
        self.check_leader()?;
        let r = r.into_inner();
        let mut t = self.world.table.lock();
        if let Some(t) = t.as_ref() {
            if t.name == r.name && r.if_not_exists {
                return Ok(Response::new(CreateTableResponse {
                    table_id: t.id.clone(),
                }));
            }
            return Err(Status::already_exists(format!("table {} exists", r.name)));
        }
        let meta: SchemaMeta = serde_json::from_slice(&r.schema_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let schema = meta
            .to_schema()
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let ps: PartitionSchema = serde_json::from_slice(&r.partition_schema_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let bounds: Vec<(Vec<u8>, Vec<u8>)> = serde_json::from_slice(&r.range_bounds_json)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let parts = ps
            .create_partitions(&bounds)
            .map_err(|e| Status::invalid_argument(e.to_string()))?;
        let tablets: Vec<(String, Partition)> = parts
            .into_iter()
            .enumerate()
            .map(|(i, p)| (format!("t{i}"), p))
            .collect();
        let mut rows = self.world.rows.lock();
        for (id, _) in &tablets {
            rows.insert(id.clone(), BTreeMap::new());
        }
        *t = Some(TableDef {
            id: "table-1".into(),
            name: r.name,
            schema,
            schema_json: r.schema_json.to_vec(),
            ps,
            replicas: r.replicas,
            tablets,
        });
        Ok(Response::new(CreateTableResponse {
            table_id: "table-1".into(),
        }))
    }

    async fn alter_table(&self, _: Request<AlterTableRequest>) -> Rpc<AlterTableResponse> {
        self.check_leader()?;
        Ok(Response::new(AlterTableResponse {}))
    }

    async fn drop_table(&self, r: Request<DropTableRequest>) -> Rpc<DropTableResponse> {
        self.check_leader()?;
        let r = r.into_inner();
        let mut t = self.world.table.lock();
        if t.as_ref().is_some_and(|t| t.name == r.name) {
            *t = None;
            return Ok(Response::new(DropTableResponse {}));
        }
        Err(Status::not_found(format!("table {}", r.name)))
    }

    async fn list_tables(&self, _: Request<ListTablesRequest>) -> Rpc<ListTablesResponse> {
        self.check_leader()?;
        let t = self.world.table.lock();
        Ok(Response::new(ListTablesResponse {
            tables: t
                .iter()
                .map(|t| TableSummary {
                    owner: String::new(),
                    table_id: t.id.clone(),
                    name: t.name.clone(),
                    state: "RUNNING".into(),
                    num_tablets: t.tablets.len() as u32,
                    replicas: t.replicas,
                })
                .collect(),
        }))
    }

    async fn get_table(&self, r: Request<GetTableRequest>) -> Rpc<GetTableResponse> {
        self.check_leader()?;
        let name = r.into_inner().name;
        let t = self.world.table.lock();
        match t.as_ref().filter(|t| t.name == name) {
            Some(t) => Ok(Response::new(GetTableResponse {
                owner: String::new(),
                table_id: t.id.clone(),
                name: t.name.clone(),
                schema_json: t.schema_json.clone().into(),
                partition_schema_json: serde_json::to_vec(&t.ps).unwrap().into(),
                replicas: t.replicas,
                state: "RUNNING".into(),
                version: 0,
                subspaces_json: Default::default(),
                colocation_group: String::new(),
            })),
            None => Err(Status::not_found(format!("table {name}"))),
        }
    }

    async fn get_table_locations(
        &self,
        r: Request<GetTableLocationsRequest>,
    ) -> Rpc<GetTableLocationsResponse> {
        self.check_leader()?;
        let name = r.into_inner().name;
        let n = self.world.location_calls.fetch_add(1, Ordering::SeqCst) + 1;
        let bad = n <= self.world.bad_leader_fetches.load(Ordering::SeqCst);
        let ts = self.world.ts_addrs.lock().clone();
        let dead = self.world.dead_addr.lock().clone();
        let t = self.world.table.lock();
        let Some(t) = t.as_ref().filter(|t| t.name == name) else {
            return Err(Status::not_found(format!("table {name}")));
        };
        let replica = |node: u64, addr: &str, leader: bool| ReplicaLocation {
            node_id: node,
            addr: addr.to_string(),
            leader,
            voter: true,
            live: true,
        };
        Ok(Response::new(GetTableLocationsResponse {
            table_id: t.id.clone(),
            tablets: t
                .tablets
                .iter()
                .map(|(id, p)| TabletLocation {
                    tablet_id: id.clone(),
                    partition_json: serde_json::to_vec(p).unwrap().into(),
                    replicas: if bad && id == "t0" {
                        vec![replica(9, &dead, true), replica(2, &ts[1], false)]
                    } else {
                        // The master believes ts1 leads everything (ts2 really leads t1).
                        vec![replica(1, &ts[0], true), replica(2, &ts[1], false)]
                    },
                })
                .collect(),
        }))
    }

    async fn heartbeat(&self, _: Request<HeartbeatRequest>) -> Rpc<HeartbeatResponse> {
        Err(Status::unimplemented("heartbeat"))
    }

    async fn list_tablet_servers(
        &self,
        _: Request<ListTabletServersRequest>,
    ) -> Rpc<ListTabletServersResponse> {
        self.check_leader()?;
        let ts = self.world.ts_addrs.lock().clone();
        Ok(Response::new(ListTabletServersResponse {
            servers: ts
                .iter()
                .enumerate()
                .map(|(i, a)| TabletServerInfo {
                    node_id: i as u64 + 1,
                    addr: a.clone(),
                    live: true,
                    millis_since_heartbeat: 10,
                    num_replicas: 4,
                })
                .collect(),
        }))
    }

    async fn authenticate(
        &self,
        _: Request<cairn_proto::AuthenticateRequest>,
    ) -> Rpc<cairn_proto::AuthenticateResponse> {
        Err(Status::unimplemented("the fake master has no users"))
    }

    async fn allocate_auto_ids(
        &self,
        _: Request<cairn_proto::AllocateAutoIdsRequest>,
    ) -> Rpc<cairn_proto::AllocateAutoIdsResponse> {
        Err(Status::unimplemented(
            "the fake master has no auto-increment keys",
        ))
    }

    async fn list_users(
        &self,
        _: Request<cairn_proto::ListUsersRequest>,
    ) -> Rpc<cairn_proto::ListUsersResponse> {
        Err(Status::unimplemented("the fake master has no users"))
    }

    async fn user_ddl(
        &self,
        _: Request<cairn_proto::UserDdlRequest>,
    ) -> Rpc<cairn_proto::UserDdlResponse> {
        Err(Status::unimplemented("the fake master has no users"))
    }

    async fn create_store(
        &self,
        _: Request<cairn_proto::CreateStoreRequest>,
    ) -> Rpc<cairn_proto::CreateStoreResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn drop_store(
        &self,
        _: Request<cairn_proto::DropStoreRequest>,
    ) -> Rpc<cairn_proto::DropStoreResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn list_stores(
        &self,
        _: Request<cairn_proto::ListStoresRequest>,
    ) -> Rpc<cairn_proto::ListStoresResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn get_store(
        &self,
        _: Request<cairn_proto::GetStoreRequest>,
    ) -> Rpc<cairn_proto::GetStoreResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn push_store(
        &self,
        _: Request<cairn_proto::PushStoreRequest>,
    ) -> Rpc<cairn_proto::PushStoreResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn rollback_store(
        &self,
        _: Request<cairn_proto::RollbackStoreRequest>,
    ) -> Rpc<cairn_proto::RollbackStoreResponse> {
        Err(Status::unimplemented("the fake master has no stores"))
    }

    async fn list_masters(&self, _: Request<ListMastersRequest>) -> Rpc<ListMastersResponse> {
        let leader = self.world.leader_master.lock().clone();
        Ok(Response::new(ListMastersResponse {
            masters: vec![
                MasterInfo {
                    node_id: 1,
                    addr: self.addr.clone(),
                    role: if leader == self.addr {
                        "LEADER"
                    } else {
                        "FOLLOWER"
                    }
                    .into(),
                },
                MasterInfo {
                    node_id: 2,
                    addr: leader,
                    role: "LEADER".into(),
                },
            ],
        }))
    }
}

// ---------------------------------------------------------------- fake tablet server

struct Scanner {
    projection: Vec<usize>,
    rows: VecDeque<(Vec<u8>, Vec<Value>)>,
    ts: u64,
    batch_rows: usize,
}

struct FakeTs {
    world: Arc<World>,
    addr: String,
    leads: HashSet<String>,
    other: String,
    scanners: Mutex<HashMap<String, Scanner>>,
    next_scanner: AtomicUsize,
}

impl FakeTs {
    fn page(&self, id: String, mut sc: Scanner) -> Result<ScanResponse, Status> {
        let t = self.world.table.lock();
        let schema = &t.as_ref().unwrap().schema;
        let n = sc.batch_rows.min(sc.rows.len());
        let page: Vec<(Vec<u8>, Vec<Value>)> = sc.rows.drain(..n).collect();
        let arrow_schema = schema.project_arrow(&sc.projection);
        let cols = sc
            .projection
            .iter()
            .map(|&i| {
                array_from_values(&schema.column(i).data_type, page.iter().map(|(_, r)| &r[i]))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Status::internal(e.to_string()))?;
        let batch = RecordBatch::try_new(arrow_schema.clone(), cols)
            .map_err(|e| Status::internal(e.to_string()))?;
        let mut w = StreamWriter::try_new(Vec::new(), &arrow_schema).unwrap();
        w.write(&batch).unwrap();
        w.finish().unwrap();
        let has_more = !sc.rows.is_empty();
        let resp = ScanResponse {
            scanner_id: if has_more { id.clone() } else { String::new() },
            arrow_ipc: w.into_inner().unwrap().into(),
            has_more,
            snapshot_timestamp: sc.ts,
            last_key: page
                .last()
                .map(|(k, _)| k.clone())
                .unwrap_or_default()
                .into(),
        };
        if has_more {
            self.scanners.lock().insert(id, sc);
        }
        Ok(resp)
    }
}

#[tonic::async_trait]
impl TabletServer for FakeTs {
    async fn create_tablet(&self, _: Request<CreateTabletRequest>) -> Rpc<CreateTabletResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn delete_tablet(&self, _: Request<DeleteTabletRequest>) -> Rpc<DeleteTabletResponse> {
        Err(Status::unimplemented("x"))
    }

    async fn bulk_insert(&self, _: Request<cairn_proto::BulkInsertRequest>) -> Rpc<WriteResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn txn_control(
        &self,
        _: Request<cairn_proto::TxnControlRequest>,
    ) -> Rpc<cairn_proto::TxnControlResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn get(&self, _: Request<cairn_proto::GetRequest>) -> Rpc<cairn_proto::GetResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn write(&self, r: Request<WriteRequest>) -> Rpc<WriteResponse> {
        let r = r.into_inner();
        if !self.leads.contains(&r.tablet_id) {
            return Err(not_leader(&self.other));
        }
        self.world
            .clock
            .fetch_max(r.propagated_timestamp, Ordering::SeqCst);
        self.world
            .writes
            .lock()
            .push((self.addr.clone(), r.tablet_id.clone()));
        let t = self.world.table.lock();
        let schema = &t.as_ref().unwrap().schema;
        let mut all = self.world.rows.lock();
        let rows = all
            .get_mut(&r.tablet_id)
            .ok_or_else(|| Status::not_found(format!("tablet {}", r.tablet_id)))?;
        let mut errors = vec![];
        let mut pos = 0u32;
        for rb in &r.batches {
            let batches =
                decode_ipc(&rb.arrow_ipc).map_err(|e| Status::invalid_argument(e.to_string()))?;
            let mut row_in_batch = 0usize;
            for b in &batches {
                for i in 0..b.num_rows() {
                    let kind = OpKind::try_from(rb.op_kinds[row_in_batch] as i32).unwrap();
                    row_in_batch += 1;
                    let mut given: Vec<Option<Value>> = vec![None; schema.num_columns()];
                    for (ci, f) in b.schema().fields().iter().enumerate() {
                        let idx = schema.index_of(f.name()).unwrap();
                        given[idx] = Some(
                            Value::from_array(
                                b.column(ci).as_ref(),
                                i,
                                &schema.column(idx).data_type,
                            )
                            .unwrap(),
                        );
                    }
                    let full: Vec<Value> = given
                        .iter()
                        .zip(schema.columns())
                        .map(|(v, c)| v.clone().unwrap_or_else(|| c.read_default()))
                        .collect();
                    let key = encode_row_key(schema, &full).unwrap();
                    let mut err = |kind: RowErrorKind, msg: &str| {
                        errors.push(RowError {
                            row: pos,
                            kind: kind as i32,
                            message: msg.into(),
                        })
                    };
                    match kind {
                        OpKind::Insert | OpKind::InsertIgnore => match rows.entry(key) {
                            std::collections::btree_map::Entry::Occupied(_) => {
                                if kind == OpKind::Insert {
                                    err(RowErrorKind::AlreadyPresent, "key already present");
                                }
                            }
                            std::collections::btree_map::Entry::Vacant(e) => {
                                e.insert(full);
                            }
                        },
                        OpKind::Upsert => {
                            rows.insert(key, full);
                        }
                        OpKind::Update | OpKind::UpdateIgnore => match rows.get_mut(&key) {
                            Some(row) => {
                                for (j, v) in given.into_iter().enumerate() {
                                    if let Some(v) = v {
                                        row[j] = v;
                                    }
                                }
                            }
                            None if kind == OpKind::Update => {
                                err(RowErrorKind::NotFound, "no such row")
                            }
                            None => {}
                        },
                        OpKind::Delete | OpKind::DeleteIgnore => {
                            if rows.remove(&key).is_none() && kind == OpKind::Delete {
                                err(RowErrorKind::NotFound, "no such row");
                            }
                        }
                    }
                    pos += 1;
                }
            }
        }
        Ok(Response::new(WriteResponse {
            row_errors: errors,
            timestamp: self.world.tick(),
        }))
    }

    async fn scan(&self, r: Request<ScanRequest>) -> Rpc<ScanResponse> {
        let r = r.into_inner();
        self.world
            .clock
            .fetch_max(r.propagated_timestamp, Ordering::SeqCst);
        if !r.scanner_id.is_empty() {
            let sc = self.scanners.lock().remove(&r.scanner_id);
            if r.close {
                return Ok(Response::new(ScanResponse::default()));
            }
            if self.world.fail_continuations.load(Ordering::SeqCst) > 0 {
                self.world.fail_continuations.fetch_sub(1, Ordering::SeqCst);
                return Err(Status::unavailable("server is shutting down"));
            }
            let sc = sc.ok_or_else(|| Status::not_found("scanner expired"))?;
            return Ok(Response::new(self.page(r.scanner_id, sc)?));
        }
        let latest = r.read_mode == cairn_proto::ReadMode::ReadLatest as i32;
        if latest && !self.leads.contains(&r.tablet_id) {
            return Err(not_leader(&self.other));
        }
        let ts = if !latest && r.snapshot_timestamp != 0 {
            r.snapshot_timestamp
        } else {
            self.world.clock.load(Ordering::SeqCst)
        };
        self.world.scan_opens.lock().push(ScanOpen {
            tablet: r.tablet_id.clone(),
            server: self.addr.clone(),
            mode: r.read_mode,
            ts,
            requested: r.snapshot_timestamp,
            propagated: r.propagated_timestamp,
            lower: r.lower_key.to_vec(),
        });
        let (projection, rows) = {
            let t = self.world.table.lock();
            let schema = &t.as_ref().unwrap().schema;
            let projection: Vec<usize> = if r.all_columns {
                (0..schema.num_columns()).collect()
            } else {
                r.projection
                    .iter()
                    .map(|c| {
                        schema
                            .index_of(c)
                            .map_err(|e| Status::invalid_argument(e.to_string()))
                    })
                    .collect::<Result<_, _>>()?
            };
            let preds: Vec<ColumnPredicate> = serde_json::from_slice(&r.predicates_json)
                .map_err(|e| Status::invalid_argument(e.to_string()))?;
            let all = self.world.rows.lock();
            let tablet = all
                .get(&r.tablet_id)
                .ok_or_else(|| Status::not_found(format!("tablet {}", r.tablet_id)))?;
            let mut rows: VecDeque<(Vec<u8>, Vec<Value>)> = tablet
                .range(r.lower_key.to_vec()..)
                .filter(|(_, row)| {
                    preds
                        .iter()
                        .all(|p| p.matches_value(&row[schema.index_of(&p.column).unwrap()]))
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if r.limit > 0 {
                rows.truncate(r.limit as usize);
            }
            (projection, rows)
        };
        let id = format!(
            "{}-sc{}",
            self.addr,
            self.next_scanner.fetch_add(1, Ordering::SeqCst)
        );
        let sc = Scanner {
            projection,
            rows,
            ts,
            batch_rows: if r.batch_rows == 0 {
                3
            } else {
                r.batch_rows as usize
            },
        };
        Ok(Response::new(self.page(id, sc)?))
    }

    async fn scanner_keep_alive(
        &self,
        _: Request<ScannerKeepAliveRequest>,
    ) -> Rpc<ScannerKeepAliveResponse> {
        Ok(Response::new(ScannerKeepAliveResponse {}))
    }
    async fn list_tablets(&self, _: Request<ListTabletsRequest>) -> Rpc<ListTabletsResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn checksum(&self, _: Request<ChecksumRequest>) -> Rpc<ChecksumResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn change_config(&self, _: Request<ChangeConfigRequest>) -> Rpc<ChangeConfigResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn step_down(&self, _: Request<StepDownRequest>) -> Rpc<StepDownResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn safe_index(&self, _: Request<SafeIndexRequest>) -> Rpc<SafeIndexResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn alter_schema(&self, _: Request<AlterSchemaRequest>) -> Rpc<AlterSchemaResponse> {
        Err(Status::unimplemented("x"))
    }
    async fn flush_tablet(&self, _: Request<FlushTabletRequest>) -> Rpc<FlushTabletResponse> {
        Err(Status::unimplemented("x"))
    }
}

// ---------------------------------------------------------------- harness

struct Cluster {
    world: Arc<World>,
    /// A follower master (hints at the leader) and the leader.
    masters: Vec<String>,
    dead: String,
}

async fn listener() -> (tokio::net::TcpListener, String) {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap().to_string();
    (l, a)
}

/// Accepted connections with Nagle off (as a real server should run them; with it on,
/// every small reply waits for a delayed ACK).
fn incoming(
    l: tokio::net::TcpListener,
) -> impl futures::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    tokio_stream::wrappers::TcpListenerStream::new(l).map(|s| {
        s.inspect(|s| {
            let _ = s.set_nodelay(true);
        })
    })
}

async fn start() -> Cluster {
    let world = Arc::new(World::default());
    // Port 1 is closed on any test machine (and cannot be bound by tests), so
    // connections there are refused. A port freed by dropping a listener could be
    // reused by a concurrently running test's server.
    let dead = "127.0.0.1:1".to_string();
    *world.dead_addr.lock() = dead.clone();
    let mut masters = vec![];
    let mut master_listeners = vec![];
    for _ in 0..2 {
        let (l, a) = listener().await;
        masters.push(a);
        master_listeners.push(l);
    }
    *world.leader_master.lock() = masters[1].clone();
    for (l, a) in master_listeners.into_iter().zip(masters.clone()) {
        let svc = MasterServer::new(FakeMaster {
            world: world.clone(),
            addr: a,
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming(l)),
        );
    }
    let (l1, a1) = listener().await;
    let (l2, a2) = listener().await;
    *world.ts_addrs.lock() = vec![a1.clone(), a2.clone()];
    let leads1: HashSet<String> = ["t0", "t2", "t3"].iter().map(|s| s.to_string()).collect();
    let leads2: HashSet<String> = ["t1"].iter().map(|s| s.to_string()).collect();
    for (l, addr, leads, other) in [(l1, a1.clone(), leads1, a2.clone()), (l2, a2, leads2, a1)] {
        let svc = TabletServerServer::new(FakeTs {
            world: world.clone(),
            addr,
            leads,
            other,
            scanners: Mutex::new(HashMap::new()),
            next_scanner: AtomicUsize::new(0),
        });
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(svc)
                .serve_with_incoming(incoming(l)),
        );
    }
    Cluster {
        world,
        masters,
        dead,
    }
}

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("v", DataType::String).nullable(),
            ColumnSpec::new("n", DataType::Int32).with_default(Value::Int32(0)),
        ],
        &["k"],
    )
    .unwrap()
}

/// hash(k) into 2 buckets x range(k) split at 100: 4 tablets.
fn spec() -> CreateTableSpec {
    let ps = PartitionSchema {
        hash_levels: vec![HashLevel {
            columns: vec!["k".into()],
            num_buckets: 2,
            seed: 0,
        }],
        range_columns: vec!["k".into()],
    };
    let split = ps.encode_range_key(&[Value::Int64(100)]).unwrap();
    CreateTableSpec::new("t", schema())
        .partition(ps)
        .range_bounds(vec![(vec![], split.clone()), (split, vec![])])
        .replicas(2)
}

async fn client(c: &Cluster) -> Client {
    // The dead master and the follower come first: the client must skip one and
    // follow the other's hint.
    Client::connect(&[c.dead.clone(), c.masters[0].clone()])
        .await
        .unwrap()
        .with_options(
            ClientOptions::default()
                .rpc_timeout(Duration::from_secs(2))
                .operation_timeout(Duration::from_secs(10)),
        )
}

fn row(k: i64) -> Vec<Value> {
    vec![
        Value::Int64(k),
        Value::String(format!("v{k}")),
        Value::Int32(k as i32),
    ]
}

fn keys(batches: &[RecordBatch]) -> Vec<i64> {
    let mut out = vec![];
    for b in batches {
        let a = b.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
        out.extend(a.values().iter().copied());
    }
    out
}

async fn load(client: &Client, n: i64) -> cairn_client::Table {
    client.create_table(spec()).await.unwrap();
    let table = client.open_table("t").await.unwrap();
    let mut s = client.new_session(&table);
    s.set_flush_mode(FlushMode::Manual);
    for k in 0..n {
        s.apply(Operation::insert(row(k))).await.unwrap();
    }
    assert_eq!(s.pending(), n as usize);
    assert!(s.flush().await.unwrap().is_empty());
    assert_eq!(s.pending(), 0);
    table
}

// ---------------------------------------------------------------- tests

#[tokio::test]
async fn master_leader_discovery_and_typed_errors() {
    let c = start().await;
    let client = client(&c).await;
    let id = client.create_table(spec()).await.unwrap();
    assert_eq!(id, "table-1");
    assert!(matches!(
        client.create_table(spec()).await,
        Err(ClientError::AlreadyExists(_))
    ));
    assert_eq!(
        client
            .create_table(spec().if_not_exists(true))
            .await
            .unwrap(),
        id
    );
    let start = std::time::Instant::now();
    assert!(matches!(
        client.open_table("nope").await,
        Err(ClientError::TableNotFound(n)) if n == "nope"
    ));
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "NOT_FOUND is not retried"
    );
    assert!(matches!(
        client.drop_table("nope", false).await,
        Err(ClientError::TableNotFound(_))
    ));
    client.drop_table("nope", true).await.unwrap();
    assert_eq!(client.list_tables().await.unwrap().len(), 1);
    assert_eq!(client.list_tablet_servers().await.unwrap().len(), 2);
    let mut m = client.master().await.unwrap();
    let r = m
        .list_tables(ListTablesRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(r.tables.len(), 1);
    let table = client.open_table("t").await.unwrap();
    assert_eq!(table.schema.num_columns(), 3);
    let locs = client.table_locations(&table, false).await.unwrap();
    assert_eq!(locs.len(), 4);
    client.drop_table("t", false).await.unwrap();
    assert!(matches!(
        client.table_locations(&table, true).await,
        Err(ClientError::TableNotFound(_))
    ));
    // A fresh client whose only master address is unreachable times out with a clear
    // error.
    let lonely = Client::connect(std::slice::from_ref(&c.dead))
        .await
        .unwrap()
        .with_options(ClientOptions::default().operation_timeout(Duration::from_millis(400)));
    match lonely.list_tables().await {
        Err(e @ ClientError::Timeout { .. }) => assert!(e.is_retryable()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn writes_follow_hints_refresh_locations_and_report_row_errors() {
    let c = start().await;
    // The first location fetch names a dead server as t0's leader.
    c.world.bad_leader_fetches.store(1, Ordering::SeqCst);
    let client = client(&c).await;
    client.create_table(spec()).await.unwrap();
    let table = client.open_table("t").await.unwrap();
    let mut s = client.new_session(&table);
    s.set_flush_mode(FlushMode::Manual);
    for k in 0..200 {
        s.apply(Operation::insert(row(k))).await.unwrap();
    }
    s.apply(Operation::insert(row(5))).await.unwrap(); // #200: duplicate
    s.apply(
        Operation::update(
            &table.schema,
            &[Value::Int64(1000)],
            &[("n", Value::Int32(1))],
        )
        .unwrap(),
    )
    .await
    .unwrap(); // #201: missing row
    s.apply(Operation::delete(&table.schema, &[Value::Int64(7)]).unwrap())
        .await
        .unwrap(); // #202
    s.apply(Operation::update(&table.schema, &[Value::Int64(8)], &[("v", Value::Null)]).unwrap())
        .await
        .unwrap(); // #203
    // Invalid operations are rejected before buffering and take no index.
    assert!(
        s.apply(Operation::insert(vec![Value::Int64(1)]))
            .await
            .is_err()
    );
    let errs = s.flush().await.unwrap();
    assert_eq!(errs.len(), 2, "{errs:?}");
    assert_eq!(errs[0].op_index, 200);
    assert_eq!(errs[0].kind, RowErrorKind::AlreadyPresent);
    assert_eq!(errs[0].op, Operation::insert(row(5)));
    assert_eq!(errs[1].op_index, 201);
    assert_eq!(errs[1].kind, RowErrorKind::NotFound);
    {
        let rows = c.world.rows.lock();
        let total: usize = rows.values().map(|t| t.len()).sum();
        assert_eq!(total, 199);
        let writes = c.world.writes.lock();
        // t1 is really led by ts2: the client followed the hint.
        let ts2 = c.world.ts_addrs.lock()[1].clone();
        assert!(writes.iter().any(|(srv, t)| t == "t1" && *srv == ts2));
        assert!(
            writes.iter().any(|(_, t)| t == "t0"),
            "t0 written after a refresh"
        );
    }
    assert!(c.world.location_calls.load(Ordering::SeqCst) >= 2);
    assert!(client.last_timestamp() > 0);

    // AutoFlushSync: a row error comes back from apply.
    let mut s = client.new_session(&table);
    match s.apply(Operation::insert(row(3))).await {
        Err(ClientError::Row(e)) => {
            assert_eq!(e.kind, RowErrorKind::AlreadyPresent);
            assert_eq!(e.op_index, 0);
        }
        other => panic!("{other:?}"),
    }
    s.apply(Operation::insert(row(500))).await.unwrap();
    assert_eq!(s.pending(), 0);

    // AutoFlushBackground: small batches go out while applying.
    let mut s = client.new_session(&table);
    s.set_flush_mode(FlushMode::AutoFlushBackground);
    s.set_batch_rows(5);
    for k in 0..60 {
        let op = Operation::upsert(vec![
            Value::Int64(k),
            Value::String("bg".into()),
            Value::Int32(-1),
        ]);
        s.apply(op).await.unwrap();
    }
    s.apply(Operation::insert(row(10))).await.unwrap(); // duplicate, #60
    assert!(s.pending() <= 61);
    let errs = s.flush().await.unwrap();
    assert_eq!(errs.len(), 1);
    assert_eq!(errs[0].op_index, 60);
    assert_eq!(s.pending(), 0);
    let rows = c.world.rows.lock();
    let bg = rows
        .values()
        .flat_map(|t| t.values())
        .filter(|r| r[1] == Value::String("bg".into()))
        .count();
    assert_eq!(bg, 60);
}

#[tokio::test]
async fn scans_pin_one_snapshot_prune_and_limit() {
    let c = start().await;
    let client = client(&c).await;
    let table = load(&client, 200).await;
    c.world.scan_opens.lock().clear();

    let r = client.scan(&table).execute().await.unwrap();
    assert_eq!(r.num_rows(), 200);
    let mut ks = keys(&r.batches);
    ks.sort();
    assert_eq!(ks, (0..200).collect::<Vec<_>>());
    assert!(r.snapshot_timestamp > 0);
    {
        let opens = c.world.scan_opens.lock().clone();
        // One open per tablet (t1's READ_LATEST open went to ts1 first, which
        // redirected to ts2, but only the serving open is recorded).
        let tablets: HashSet<&str> = opens.iter().map(|o| o.tablet.as_str()).collect();
        assert_eq!(tablets.len(), 4);
        assert_eq!(opens[0].mode, cairn_proto::ReadMode::ReadLatest as i32);
        for o in &opens[1..] {
            assert_eq!(o.mode, cairn_proto::ReadMode::ReadAtSnapshot as i32);
            assert_eq!(
                o.ts, r.snapshot_timestamp,
                "every tablet reads the same snapshot"
            );
        }
    }

    // Pruning by range: k >= 100 only touches the two upper range partitions.
    c.world.scan_opens.lock().clear();
    let r = client
        .scan(&table)
        .predicate(ColumnPredicate::ge("k", Value::Int64(100)))
        .execute()
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 100);
    assert_eq!(c.world.scan_opens.lock().len(), 2);

    // Pruning by hash and range: k = 42 touches one tablet.
    c.world.scan_opens.lock().clear();
    let r = client
        .scan(&table)
        .predicate(ColumnPredicate::eq("k", Value::Int64(42)))
        .projection(vec!["v".to_string()])
        .execute()
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 1);
    assert_eq!(r.schema.fields().len(), 1);
    assert_eq!(c.world.scan_opens.lock().len(), 1);

    // Limits apply across tablets.
    let r = client
        .scan(&table)
        .limit(7)
        .batch_rows(2)
        .execute()
        .await
        .unwrap();
    assert_eq!(r.num_rows(), 7);
    assert_eq!(
        client
            .scan(&table)
            .limit(0)
            .execute()
            .await
            .unwrap()
            .num_rows(),
        0
    );
    assert_eq!(client.scan(&table).count().await.unwrap(), 200);
    assert_eq!(
        client
            .scan(&table)
            .predicate(ColumnPredicate::lt("k", Value::Int64(10)))
            .count()
            .await
            .unwrap(),
        10
    );

    // Bad input is rejected before anything is sent.
    assert!(
        client
            .scan(&table)
            .projection(["nope"])
            .execute()
            .await
            .is_err()
    );
    assert!(
        client
            .scan(&table)
            .predicate(ColumnPredicate::eq("k", Value::String("x".into())))
            .execute()
            .await
            .is_err()
    );

    // Snapshot modes.
    c.world.scan_opens.lock().clear();
    let last = client.last_timestamp();
    client
        .scan(&table)
        .read_mode(ReadMode::ReadYourWrites)
        .execute()
        .await
        .unwrap();
    let opens = c.world.scan_opens.lock().clone();
    assert!(
        opens
            .iter()
            .all(|o| o.mode == cairn_proto::ReadMode::ReadAtSnapshot as i32)
    );
    // The first tablet's server picks a fresh snapshot after observing the client's
    // last timestamp; the other tablets are read at that snapshot.
    assert_eq!((opens[0].requested, opens[0].propagated), (0, last));
    assert!(opens[1..].iter().all(|o| o.requested == opens[0].ts));
    let r = client
        .scan(&table)
        .read_mode(ReadMode::Snapshot(5))
        .execute()
        .await
        .unwrap();
    assert_eq!(r.snapshot_timestamp, 5);

    // Only one tablet.
    let r = client
        .scan(&table)
        .only_tablet("t2")
        .execute()
        .await
        .unwrap();
    let locs = client.table_locations(&table, false).await.unwrap();
    let part = &locs.iter().find(|t| t.tablet_id == "t2").unwrap().partition;
    for k in keys(&r.batches) {
        let pk = table
            .partition_key(&[Some(Value::Int64(k)), None, None])
            .unwrap();
        assert!(part.contains(&pk));
    }
    assert!(matches!(
        client.scan(&table).only_tablet("zz").execute().await,
        Err(ClientError::NotFound(_))
    ));

    // Streams and cursors.
    let mut cur = client.scan(&table).batch_rows(16).cursor().await.unwrap();
    assert_eq!(cur.next_batch().await.unwrap().unwrap().num_rows(), 16);
    cur.keep_alive().await.unwrap();
    assert!(cur.snapshot_timestamp().is_some());
    cur.close().await;
    let s = client.scan(&table).batch_rows(16).stream().await.unwrap();
    let batches: Vec<RecordBatch> = s.map(|b| b.unwrap()).collect().await;
    assert_eq!(keys(&batches).len(), 200);
}

#[tokio::test]
async fn scans_survive_a_lost_scanner() {
    let c = start().await;
    let client = client(&c).await;
    let table = load(&client, 200).await;

    // Ordered: resumes after the last key on another replica, at the same snapshot.
    c.world.scan_opens.lock().clear();
    c.world.fail_continuations.store(2, Ordering::SeqCst);
    let r = client
        .scan(&table)
        .ordered(true)
        .batch_rows(4)
        .execute()
        .await
        .unwrap();
    let ks = keys(&r.batches);
    assert_eq!(ks.len(), 200, "no row lost or repeated");
    let uniq: HashSet<i64> = ks.iter().copied().collect();
    assert_eq!(uniq.len(), 200);
    {
        let opens = c.world.scan_opens.lock().clone();
        let resumed: Vec<&ScanOpen> = opens.iter().filter(|o| !o.lower.is_empty()).collect();
        assert_eq!(resumed.len(), 2, "{opens:?}");
        // Both failures hit t0's scanner: the first resume moves to the other replica
        // (ts2); when that fails too, every replica has failed once and ts1 is tried
        // again.
        let ts2 = c.world.ts_addrs.lock()[1].clone();
        assert_eq!(resumed[0].server, ts2, "resumed on the other replica");
        for o in resumed {
            assert_eq!(o.mode, cairn_proto::ReadMode::ReadAtSnapshot as i32);
            assert_eq!(o.ts, r.snapshot_timestamp);
        }
    }

    // Unordered execute: the interrupted tablet is rescanned from scratch.
    c.world.fail_continuations.store(1, Ordering::SeqCst);
    let r = client.scan(&table).batch_rows(4).execute().await.unwrap();
    let ks = keys(&r.batches);
    assert_eq!(ks.len(), 200);
    assert_eq!(ks.iter().copied().collect::<HashSet<_>>().len(), 200);
    c.world.fail_continuations.store(1, Ordering::SeqCst);
    assert_eq!(
        client.scan(&table).batch_rows(4).count().await.unwrap(),
        200
    );

    // An unordered cursor cannot take back what it handed out.
    c.world.fail_continuations.store(1, Ordering::SeqCst);
    let mut cur = client.scan(&table).batch_rows(4).cursor().await.unwrap();
    let first = cur.next_batch().await.unwrap().unwrap();
    assert_eq!(first.num_rows(), 4);
    match cur.next_batch().await {
        Err(ClientError::ScanInterrupted { rows, .. }) => assert_eq!(rows, 4),
        other => panic!("{other:?}"),
    }

    // An ordered cursor resumes.
    c.world.fail_continuations.store(1, Ordering::SeqCst);
    let mut cur = client
        .scan(&table)
        .ordered(true)
        .batch_rows(4)
        .cursor()
        .await
        .unwrap();
    let mut n = 0;
    while let Some(b) = cur.next_batch().await.unwrap() {
        n += b.num_rows();
    }
    assert_eq!(n, 200);
}
