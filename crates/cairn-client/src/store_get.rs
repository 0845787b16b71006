//! Reading a read-only store by key, routed by its ring.
//!
//! The Voldemort read-only paper (§3.1.2) routes a key on the client: hash it to its
//! primary partition, take that partition's *preference list* (the nodes holding its
//! replicas, in order) and ask the first node, moving down the list when a node is
//! down. [`StoreReader`] does that with the ring from the store's catalog entry:
//!
//! - [`StoreReader::get`] looks one key up;
//! - [`StoreReader::get_all`] looks many up with one `StoreGet` per server (keys
//!   grouped by the first live node of their preference list), the batches in
//!   parallel; keys whose server fails move on to their next replica.
//!
//! Every answer says which version served it; all keys of one server's batch come
//! from the same version. When every replica of a key has failed, the reader asks
//! the master for the store's entry again (servers may have moved) and tries once
//! more before giving up.

use std::collections::HashMap;
use std::sync::Arc;

use cairn_common::Value;
use cairn_proto::StoreGetRequest;
use cairn_readonly::KeyHash;
use parking_lot::RwLock;
use tonic::Status;

use crate::client::Client;
use crate::error::{ClientError, Failure, Result, classify};
use crate::retry::{attempt, request};
use crate::stores::StoreEntry;

/// A key's answer: the value columns (`None`: no such key) and the version that
/// answered.
#[derive(Clone, Debug, PartialEq)]
pub struct StoreRow {
    /// The store version the server served.
    pub version: u64,
    /// The value columns, in the store's value order; `None` if the key is absent.
    pub value: Option<Vec<Value>>,
}

/// Reads one read-only store (module docs). Cheap to clone.
#[derive(Clone)]
pub struct StoreReader {
    client: Client,
    entry: Arc<RwLock<Arc<StoreEntry>>>,
    /// Set while a background refresh runs.
    refreshing: Arc<std::sync::atomic::AtomicBool>,
}

impl Client {
    /// A reader for read-only store `name` (its ring from the master).
    pub async fn open_store(&self, name: &str) -> Result<StoreReader> {
        let entry = self.get_store(name).await?;
        Ok(StoreReader {
            client: self.clone(),
            entry: Arc::new(RwLock::new(Arc::new(entry))),
            refreshing: Arc::default(),
        })
    }
}

/// A key on its way: its encoding, its preference list (ring node indexes) and how
/// far down the list it is.
struct Pending {
    slot: usize,
    key: Vec<u8>,
    nodes: Vec<usize>,
    next: usize,
}

impl StoreReader {
    /// The store's catalog entry as this reader last fetched it.
    pub fn entry(&self) -> Arc<StoreEntry> {
        self.entry.read().clone()
    }

    /// Fetches the store's entry from the master again.
    pub async fn refresh(&self) -> Result<()> {
        let name = self.entry().name.clone();
        let e = self.client.get_store(&name).await?;
        *self.entry.write() = Arc::new(e);
        Ok(())
    }

    /// Refreshes the entry without waiting, unless a refresh is already running: a
    /// server answered with a version newer than the entry's, so the store was pushed
    /// or rebalanced (and a rebalance changes the ring).
    fn refresh_in_background(&self) {
        use std::sync::atomic::Ordering;
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            if let Err(e) = me.refresh().await {
                tracing::debug!(error = %e, "could not refresh a store's ring");
            }
            me.refreshing.store(false, Ordering::Release);
        });
    }

    /// The value columns of `key` (one value per key column), `None` if absent.
    pub async fn get(&self, key: &[Value]) -> Result<Option<Vec<Value>>> {
        let mut rows = self.get_all(&[key.to_vec()]).await?;
        Ok(rows.pop().and_then(|r| r.value))
    }

    /// Looks every key up (module docs); the answers are in the keys' order.
    pub async fn get_all(&self, keys: &[Vec<Value>]) -> Result<Vec<StoreRow>> {
        let entry = self.entry();
        let encoded = keys
            .iter()
            .map(|k| {
                entry.schema.encode_key(k).map_err(|e| {
                    ClientError::InvalidArgument(format!("store '{}': {e}", entry.name))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let raw = match self.get_encoded(&entry, &encoded).await {
            Ok(r) => r,
            Err(_) => {
                // Every replica of some key failed: the ring's servers may have moved.
                self.refresh().await?;
                let entry = self.entry();
                self.get_encoded(&entry, &encoded).await?
            }
        };
        let entry = self.entry();
        if raw
            .iter()
            .any(|(v, _)| *v > entry.current_version.unwrap_or(0))
        {
            self.refresh_in_background();
        }
        raw.into_iter()
            .map(|(version, bytes)| {
                let value = bytes
                    .map(|b| entry.schema.decode_value(&b))
                    .transpose()
                    .map_err(|e| {
                        ClientError::Internal(format!(
                            "store '{}' version {version} sent a value that does not \
                             decode: {e}",
                            entry.name
                        ))
                    })?;
                Ok(StoreRow { version, value })
            })
            .collect()
    }

    /// Looks encoded keys up through the ring of `entry`: `(version, value bytes)` per
    /// key.
    pub async fn get_encoded(
        &self,
        entry: &StoreEntry,
        keys: &[Vec<u8>],
    ) -> Result<Vec<(u64, Option<Vec<u8>>)>> {
        let mut out: Vec<Option<(u64, Option<Vec<u8>>)>> = vec![None; keys.len()];
        let mut pending: Vec<Pending> = keys
            .iter()
            .enumerate()
            .map(|(slot, k)| {
                let p = entry.layout.partition_of(&KeyHash::of(k));
                Pending {
                    slot,
                    key: k.clone(),
                    nodes: entry
                        .layout
                        .preference_list(p)
                        .into_iter()
                        .map(|(_, n)| n as usize)
                        .collect(),
                    next: 0,
                }
            })
            .collect();
        let mut last_error: HashMap<usize, String> = HashMap::new();
        while !pending.is_empty() {
            // Keys whose every replica failed end the read.
            if let Some(p) = pending.iter().find(|p| p.next >= p.nodes.len()) {
                let tried: Vec<String> = p
                    .nodes
                    .iter()
                    .map(|n| {
                        let addr = entry.nodes.get(*n).map_or("?", |x| x.addr.as_str());
                        format!(
                            "{addr}: {}",
                            last_error.get(n).map_or("no answer", String::as_str)
                        )
                    })
                    .collect();
                return Err(ClientError::StoreUnavailable(format!(
                    "no replica of a key of store '{}' answered ({})",
                    entry.name,
                    tried.join("; ")
                )));
            }
            let mut by_node: HashMap<usize, Vec<Pending>> = HashMap::new();
            for p in pending.drain(..) {
                by_node.entry(p.nodes[p.next]).or_default().push(p);
            }
            let calls = by_node.into_iter().map(|(node, batch)| async move {
                let result = self.call_node(entry, node, &batch).await;
                (node, batch, result)
            });
            for (node, batch, result) in futures::future::join_all(calls).await {
                match result {
                    Ok((version, values)) => {
                        for (p, v) in batch.into_iter().zip(values) {
                            out[p.slot] = Some((version, v));
                        }
                    }
                    Err(status) => {
                        // Every replica would say the same: the caller lacks the
                        // privilege or the login.
                        if let Some(e) = refusal(&status) {
                            return Err(e);
                        }
                        last_error.insert(node, status.message().to_string());
                        for mut p in batch {
                            p.next += 1;
                            pending.push(p);
                        }
                    }
                }
            }
        }
        Ok(out.into_iter().map(|o| o.unwrap_or((0, None))).collect())
    }

    /// Every tuple (encoded key, encoded value) of the store, one version throughout
    /// (module docs of [`StoreReader::scan_partition`]); `version` pins it (0: the
    /// live one of the first partition read).
    pub async fn scan_all(&self, version: u64) -> Result<(u64, Vec<(Vec<u8>, Vec<u8>)>)> {
        let entry = self.entry();
        let mut version = version;
        let mut out = Vec::new();
        for p in 0..entry.layout.partitions() {
            let (v, tuples) = self.scan_partition(&entry, p, version).await?;
            version = v;
            out.extend(tuples);
        }
        Ok((version, out))
    }

    /// Every tuple of primary partition `p`, read page by page from the first replica
    /// of its preference list that answers all pages; `version` 0 takes the live one.
    /// A server that swapped during the scan fails it rather than mix versions.
    pub async fn scan_partition(
        &self,
        entry: &StoreEntry,
        p: u32,
        version: u64,
    ) -> Result<(u64, Vec<(Vec<u8>, Vec<u8>)>)> {
        let t = self.client.options().rpc_timeout;
        let mut errors = Vec::new();
        for (_, node) in entry.layout.preference_list(p) {
            let Some(addr) = entry.nodes.get(node as usize).map(|n| n.addr.clone()) else {
                continue;
            };
            let attempt_node = async {
                let mut stub = self
                    .client
                    .store_stub(&addr)
                    .map_err(|e| Status::unavailable(e.to_string()))?;
                let mut req = cairn_proto::StoreScanRequest {
                    store_id: entry.id.clone(),
                    partition: p,
                    version,
                    ..Default::default()
                };
                let mut tuples = Vec::new();
                loop {
                    let r = attempt(t, stub.store_scan(request(req.clone(), t))).await?;
                    req.version = r.version;
                    tuples.extend(
                        r.keys
                            .into_iter()
                            .zip(r.values)
                            .map(|(k, v)| (k.to_vec(), v.to_vec())),
                    );
                    if !r.more {
                        return Ok::<_, Status>((r.version, tuples));
                    }
                    req.chunk = r.next_chunk;
                    req.entry = r.next_entry;
                }
            };
            let s = match attempt_node.await {
                Ok(r) => return Ok(r),
                Err(s) => s,
            };
            if s.code() == tonic::Code::FailedPrecondition {
                return Err(ClientError::InvalidArgument(s.message().to_string()));
            }
            if let Some(e) = refusal(&s) {
                return Err(e);
            }
            errors.push(format!("{addr}: {}", s.message()));
        }
        Err(ClientError::StoreUnavailable(format!(
            "no replica of partition {p} of store '{}' answered a scan ({})",
            entry.name,
            errors.join("; ")
        )))
    }

    /// One `StoreGet` to ring node `node` for `batch`.
    async fn call_node(
        &self,
        entry: &StoreEntry,
        node: usize,
        batch: &[Pending],
    ) -> std::result::Result<(u64, Vec<Option<Vec<u8>>>), Status> {
        let addr = entry
            .nodes
            .get(node)
            .map(|n| n.addr.clone())
            .ok_or_else(|| {
                Status::internal(format!("the ring names node {node}, not in the entry"))
            })?;
        let mut stub = self
            .client
            .store_stub(&addr)
            .map_err(|e| Status::unavailable(e.to_string()))?;
        let t = self.client.options().rpc_timeout;
        let req = StoreGetRequest {
            store_id: entry.id.clone(),
            keys: batch.iter().map(|p| p.key.clone().into()).collect(),
        };
        let resp = attempt(t, stub.store_get(request(req, t))).await?;
        if resp.values.len() != batch.len() {
            return Err(Status::internal(format!(
                "{addr} answered {} values for {} keys",
                resp.values.len(),
                batch.len()
            )));
        }
        Ok((
            resp.version,
            resp.values
                .into_iter()
                .map(|v| v.found.then(|| v.value.to_vec()))
                .collect(),
        ))
    }
}

/// The error for a server's refusal of the caller (no privilege, no valid login),
/// which no other replica would answer differently; `None` for any other status.
/// The mapping is the client's usual one ([`classify`]).
fn refusal(status: &Status) -> Option<ClientError> {
    match classify("a store read", "", status) {
        Failure::Fatal(
            e @ (ClientError::PermissionDenied(_) | ClientError::Unauthenticated(_)),
        ) => Some(e),
        _ => None,
    }
}
