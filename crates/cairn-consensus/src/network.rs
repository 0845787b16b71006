//! Raft RPCs over gRPC: the client side openraft drives ([`NetworkFactory`]) and the
//! server side ([`ConsensusService`]) that routes each message to its group through a
//! [`GroupRegistry`]. Requests are postcard-encoded openraft messages (entries carry
//! their payload as raw bytes); replies are JSON (small).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use cairn_proto::consensus_client::ConsensusClient;
use cairn_proto::{RaftReply, RaftRequest};
use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::RPCOption;
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::{RaftNetwork, RaftNetworkFactory};
use parking_lot::RwLock;
use tonic::transport::Channel;

use crate::{Node, NodeId, Raft, TypeConfig};

/// Largest RPC message either side accepts (row batches, tablet-copy chunks).
pub const MAX_MESSAGE_BYTES: usize = 256 << 20;

/// Entry payload bytes one `AppendEntries` carries at most (it always carries at least
/// one entry). openraft sends up to 64 entries at once; with bulk-insert entries of
/// several MiB each a follower catching up would otherwise get messages past
/// [`MAX_MESSAGE_BYTES`], or too big to arrive within the heartbeat-long RPC timeout.
pub const MAX_APPEND_BYTES: usize = 24 << 20;

/// How many of `sizes` (entry payload sizes, in order) fit in one `AppendEntries`:
/// a prefix within [`MAX_APPEND_BYTES`], and never none.
fn entries_that_fit(sizes: impl IntoIterator<Item = usize>) -> usize {
    let mut total = 0usize;
    let mut n = 0;
    for size in sizes {
        total += size;
        if n > 0 && total > MAX_APPEND_BYTES {
            break;
        }
        n += 1;
    }
    n
}

/// A server's `Consensus` service for the groups in `registry`.
pub fn consensus_server(
    registry: GroupRegistry,
    gate: Arc<cairn_proto::auth::AuthGate>,
) -> cairn_proto::consensus_server::ConsensusServer<ConsensusService> {
    cairn_proto::consensus_server::ConsensusServer::new(ConsensusService::new(registry, gate))
        .max_decoding_message_size(MAX_MESSAGE_BYTES)
        .max_encoding_message_size(MAX_MESSAGE_BYTES)
}

/// Serves `router` on `listener` until `stop` turns true. Every connection gets
/// TCP_NODELAY: small RPCs must not wait for Nagle's algorithm.
pub fn spawn_rpc_server(
    listener: tokio::net::TcpListener,
    router: tonic::transport::server::Router,
    mut stop: tokio::sync::watch::Receiver<bool>,
    what: &'static str,
) -> tokio::task::JoinHandle<()> {
    let incoming = tokio_stream::StreamExt::map(
        tokio_stream::wrappers::TcpListenerStream::new(listener),
        |s| {
            if let Ok(s) = &s {
                let _ = s.set_nodelay(true);
            }
            s
        },
    );
    tokio::spawn(async move {
        let r = router
            .serve_with_incoming_shutdown(incoming, async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = r {
            tracing::error!(error = %e, "{what} RPC listener failed");
        }
    })
}

/// Shared gRPC channels by address (one HTTP/2 connection per peer server). Every
/// internal RPC — Raft messages, heartbeats, the master's calls to tablet servers —
/// takes its channel here, per call.
#[derive(Clone, Default, Debug)]
pub struct ChannelPool {
    channels: Arc<RwLock<HashMap<String, Channel>>>,
    /// Mutual TLS for every channel, when the cluster runs with TLS.
    tls: Option<Arc<cairn_proto::TlsConfig>>,
}

/// Whether the failpoint `net::partition` (`return(<addr>;<addr>;…)`) cuts this process
/// off from `addr`: the fault harness's network partitions. Without failpoints
/// compiled in, never.
fn partitioned_from(addr: &str) -> bool {
    let cut =
        |arg: Option<String>| arg.is_some_and(|list| list.split(';').any(|a| a.trim() == addr));
    // Without failpoints compiled in, the macro below expands to nothing.
    let _ = &cut;
    fail::fail_point!("net::partition", cut);
    false
}

impl ChannelPool {
    /// A pool whose channels use mutual TLS with `tls` (plain TCP without).
    pub fn new(tls: Option<Arc<cairn_proto::TlsConfig>>) -> Self {
        ChannelPool {
            channels: Default::default(),
            tls,
        }
    }

    /// The pool's TLS configuration.
    pub fn tls(&self) -> Option<&Arc<cairn_proto::TlsConfig>> {
        self.tls.as_ref()
    }

    /// A channel to `addr` (`host:port`), connected lazily.
    pub fn get(&self, addr: &str) -> crate::Result<Channel> {
        if partitioned_from(addr) {
            return Err(crate::ConsensusError::Unavailable(format!(
                "{addr} is unreachable (network partition injected by a failpoint)"
            )));
        }
        if let Some(c) = self.channels.read().get(addr) {
            return Ok(c.clone());
        }
        let ep = cairn_proto::tls::endpoint(addr, self.tls.as_deref())
            .map_err(|e| {
                crate::ConsensusError::Unavailable(format!("bad peer address {addr}: {e}"))
            })?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true)
            .http2_keep_alive_interval(Duration::from_secs(10));
        let ch = ep.connect_lazy();
        self.channels.write().insert(addr.to_string(), ch.clone());
        Ok(ch)
    }
}

/// Creates one network client per (group, target).
#[derive(Clone, Debug)]
pub struct NetworkFactory {
    group_id: String,
    pool: ChannelPool,
}

impl NetworkFactory {
    /// A factory for group `group_id`.
    pub fn new(group_id: String, pool: ChannelPool) -> Self {
        NetworkFactory { group_id, pool }
    }
}

/// A connection from one group member to another.
pub struct Network {
    group_id: String,
    target: NodeId,
    addr: String,
    pool: ChannelPool,
}

impl RaftNetworkFactory<TypeConfig> for NetworkFactory {
    type Network = Network;
    async fn new_client(&mut self, target: NodeId, node: &Node) -> Network {
        Network {
            group_id: self.group_id.clone(),
            target,
            addr: node.addr.clone(),
            pool: self.pool.clone(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct Msg(String);

enum Kind {
    Append,
    Vote,
    Snapshot,
}

impl Network {
    async fn call<Req, Resp, E>(
        &self,
        kind: Kind,
        req: &Req,
        ttl: Duration,
    ) -> Result<Resp, RPCError<NodeId, Node, RaftError<NodeId, E>>>
    where
        Req: serde::Serialize,
        Resp: serde::de::DeserializeOwned,
        E: std::error::Error + serde::de::DeserializeOwned,
    {
        let payload = postcard::to_stdvec(req)
            .map_err(|e| RPCError::Network(NetworkError::new(&Msg(e.to_string()))))?;
        let ch = self
            .pool
            .get(&self.addr)
            .map_err(|e| RPCError::Unreachable(Unreachable::new(&e)))?;
        let mut client = ConsensusClient::new(ch)
            .max_decoding_message_size(MAX_MESSAGE_BYTES)
            .max_encoding_message_size(MAX_MESSAGE_BYTES);
        let mut request = tonic::Request::new(RaftRequest {
            group_id: self.group_id.clone(),
            payload: payload.into(),
        });
        request.set_timeout(ttl);
        let fut = async {
            match kind {
                Kind::Append => client.append_entries(request).await,
                Kind::Vote => client.vote(request).await,
                Kind::Snapshot => client.install_snapshot(request).await,
            }
        };
        let reply = match tokio::time::timeout(ttl, fut).await {
            Err(_) => {
                return Err(RPCError::Unreachable(Unreachable::new(&Msg(format!(
                    "no answer from {} within {ttl:?}",
                    self.addr
                )))));
            }
            Ok(Err(status)) => {
                return Err(RPCError::Unreachable(Unreachable::new(&status)));
            }
            Ok(Ok(r)) => r.into_inner(),
        };
        let res: Result<Resp, RaftError<NodeId, E>> = serde_json::from_slice(&reply.payload)
            .map_err(|e| RPCError::Network(NetworkError::new(&Msg(e.to_string()))))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<TypeConfig> for Network {
    async fn append_entries(
        &mut self,
        mut rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        let fit = entries_that_fit(rpc.entries.iter().map(|e| match &e.payload {
            openraft::EntryPayload::Normal(r) => r.0.len(),
            _ => 0,
        }));
        if fit == rpc.entries.len() {
            return self.call(Kind::Append, &rpc, option.hard_ttl()).await;
        }
        // Send a prefix; openraft sends the rest next, from where the follower matches.
        rpc.entries.truncate(fit);
        let last = rpc.entries.last().map(|e| e.log_id);
        let resp: AppendEntriesResponse<NodeId> =
            self.call(Kind::Append, &rpc, option.hard_ttl()).await?;
        Ok(match resp {
            AppendEntriesResponse::Success => AppendEntriesResponse::PartialSuccess(last),
            other => other,
        })
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Node, RaftError<NodeId, InstallSnapshotError>>,
    > {
        self.call(Kind::Snapshot, &rpc, option.hard_ttl()).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Node, RaftError<NodeId>>> {
        self.call(Kind::Vote, &rpc, option.hard_ttl()).await
    }
}

/// The Raft groups a server hosts, by group id.
#[derive(Clone, Default)]
pub struct GroupRegistry {
    groups: Arc<RwLock<HashMap<String, Raft>>>,
}

impl GroupRegistry {
    /// Registers a group.
    pub fn insert(&self, id: &str, raft: Raft) {
        self.groups.write().insert(id.to_string(), raft);
    }
    /// Unregisters a group.
    pub fn remove(&self, id: &str) {
        self.groups.write().remove(id);
    }
    /// Looks a group up.
    pub fn get(&self, id: &str) -> Option<Raft> {
        self.groups.read().get(id).cloned()
    }
}

/// The gRPC `Consensus` service of a server: Cairn servers only (a cluster
/// certificate, on a cluster with TLS).
#[derive(Clone)]
pub struct ConsensusService {
    registry: GroupRegistry,
    gate: Arc<cairn_proto::auth::AuthGate>,
}

impl ConsensusService {
    /// Serves the groups in `registry` to the callers `gate` lets in as internal.
    pub fn new(registry: GroupRegistry, gate: Arc<cairn_proto::auth::AuthGate>) -> Self {
        ConsensusService { registry, gate }
    }

    /// The group a request names, for an internal caller.
    fn group_for(&self, request: &tonic::Request<RaftRequest>) -> Result<Raft, tonic::Status> {
        self.gate
            .check(request, cairn_proto::auth::Action::Internal("Raft"))?;
        self.group(&request.get_ref().group_id)
    }

    fn group(&self, id: &str) -> Result<Raft, tonic::Status> {
        cairn_common::validate_id(cairn_common::IdKind::RaftGroup, id)
            .map_err(|e| tonic::Status::invalid_argument(e.to_string()))?;
        self.registry.get(id).ok_or_else(|| {
            tonic::Status::not_found(format!("this server hosts no consensus group {id}"))
        })
    }
}

fn decode<T: serde::de::DeserializeOwned>(b: &[u8]) -> Result<T, tonic::Status> {
    postcard::from_bytes(b)
        .map_err(|e| tonic::Status::invalid_argument(format!("malformed raft message: {e}")))
}

fn reply<T: serde::Serialize>(v: &T) -> Result<tonic::Response<RaftReply>, tonic::Status> {
    let payload = serde_json::to_vec(v).map_err(|e| tonic::Status::internal(e.to_string()))?;
    Ok(tonic::Response::new(RaftReply {
        payload: payload.into(),
    }))
}

#[tonic::async_trait]
impl cairn_proto::consensus_server::Consensus for ConsensusService {
    async fn append_entries(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let raft = self.group_for(&request)?;
        let r = request.into_inner();
        let req: AppendEntriesRequest<TypeConfig> = decode(&r.payload)?;
        reply(&raft.append_entries(req).await)
    }

    async fn vote(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let raft = self.group_for(&request)?;
        let r = request.into_inner();
        let req: VoteRequest<NodeId> = decode(&r.payload)?;
        reply(&raft.vote(req).await)
    }

    async fn install_snapshot(
        &self,
        request: tonic::Request<RaftRequest>,
    ) -> Result<tonic::Response<RaftReply>, tonic::Status> {
        let raft = self.group_for(&request)?;
        let r = request.into_inner();
        let req: InstallSnapshotRequest<TypeConfig> = decode(&r.payload)?;
        reply(&raft.install_snapshot(req).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn appends_are_cut_by_bytes_but_carry_at_least_one_entry() {
        assert_eq!(entries_that_fit([]), 0);
        assert_eq!(entries_that_fit([10, 20, 30]), 3);
        assert_eq!(entries_that_fit([MAX_APPEND_BYTES * 2, 1]), 1);
        assert_eq!(
            entries_that_fit([MAX_APPEND_BYTES / 2, MAX_APPEND_BYTES / 2, 1]),
            2
        );
    }
}
