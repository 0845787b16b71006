//! One running Raft group: a replica of a tablet, or of the master catalog.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use cairn_wal::FsyncPolicy;
use openraft::error::{CheckIsLeaderError, ClientWriteError, RaftError};
use openraft::{ChangeMembers, Config, ServerState, SnapshotPolicy};

use crate::error::{ConsensusError, Result};
use crate::log_store::LogStore;
use crate::network::{ChannelPool, GroupRegistry, NetworkFactory};
use crate::state_machine::{StateMachine, StateMachineStore};
use crate::{Node, NodeId, Raft, Request};

/// Timing and durability of a group. Defaults follow Kudu.
#[derive(Clone, Debug)]
pub struct GroupOptions {
    /// Leader heartbeat interval (500 ms).
    pub heartbeat: Duration,
    /// Election timeout, lower bound (1.5 s); the upper bound is 1.5 times it.
    pub election_timeout: Duration,
    /// Build a snapshot (checkpoint: flush the state machine, allow log purge) after
    /// this many entries.
    pub snapshot_every: u64,
    /// Entries kept behind the last snapshot, so lagging followers catch up from the
    /// log rather than by copy.
    pub keep_behind_snapshot: u64,
    /// When the log is fsynced.
    pub fsync: FsyncPolicy,
}

impl Default for GroupOptions {
    fn default() -> Self {
        GroupOptions {
            heartbeat: Duration::from_millis(500),
            election_timeout: Duration::from_millis(1500),
            snapshot_every: 20_000,
            keep_behind_snapshot: 5_000,
            fsync: FsyncPolicy::Always,
        }
    }
}

/// A replica's role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaRole {
    /// Leader.
    Leader,
    /// Voting follower.
    Follower,
    /// Non-voting learner.
    Learner,
    /// Running an election.
    Candidate,
    /// Stopped.
    Shutdown,
}

/// What a replica knows about its group.
#[derive(Clone, Debug)]
pub struct ReplicaStatus {
    /// Its role.
    pub role: ReplicaRole,
    /// Current term.
    pub term: u64,
    /// The leader, if known.
    pub leader: Option<NodeId>,
    /// Voters and their addresses.
    pub voters: BTreeMap<NodeId, String>,
    /// Learners and their addresses.
    pub learners: BTreeMap<NodeId, String>,
    /// Last applied index.
    pub last_applied: u64,
    /// Last log index.
    pub last_log_index: u64,
    /// The last index purged from the log (0: none): a member that has not reached
    /// it can only catch up by a copy of the state machine.
    pub purged_index: u64,
    /// Leader only: the index each member has replicated (absent when unknown).
    pub matched: BTreeMap<NodeId, u64>,
}

/// One Raft group member.
pub struct RaftGroup {
    id: String,
    node_id: NodeId,
    dir: PathBuf,
    raft: Raft,
    log: LogStore,
    registry: GroupRegistry,
    election_timeout: Duration,
    /// While set, this former leader is handing leadership over (see
    /// [`RaftGroup::step_down`]).
    stepping_down: parking_lot::Mutex<Option<tokio::time::Instant>>,
    /// (term, log index) this leader must have applied before it serves.
    ready_from: parking_lot::Mutex<Option<(u64, u64)>>,
    /// The last completed leadership confirmation: when it started and the read index
    /// it returned. Concurrent reads share rounds (see [`RaftGroup::confirm_leadership`]).
    read_round: tokio::sync::Mutex<Option<(tokio::time::Instant, u64)>>,
    /// The leader lease from the last confirmation: (term, until when this member may
    /// serve reads without another round). See [`RaftGroup::confirm_leadership`].
    lease: parking_lot::Mutex<Option<(u64, tokio::time::Instant)>>,
}

impl std::fmt::Debug for RaftGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RaftGroup({} on node {})", self.id, self.node_id)
    }
}

fn raft_err<E: std::fmt::Display>(e: E) -> ConsensusError {
    ConsensusError::Raft(e.to_string())
}

impl RaftGroup {
    /// Opens (or creates) this node's member of group `id`, with its log and state under
    /// `dir`, and registers it so the server's consensus service routes to it.
    pub async fn open(
        id: &str,
        node_id: NodeId,
        dir: &Path,
        sm: Arc<dyn StateMachine>,
        opts: &GroupOptions,
        pool: ChannelPool,
        registry: GroupRegistry,
    ) -> Result<Arc<RaftGroup>> {
        let log = LogStore::open(&dir.join("raft"), opts.fsync)?;
        let sm_store = StateMachineStore::open(&dir.join("raft"), sm, log.clone())?;
        let hb = opts.heartbeat.as_millis() as u64;
        let el = opts.election_timeout.as_millis() as u64;
        let config = Config {
            cluster_name: id.to_string(),
            heartbeat_interval: hb.max(10),
            election_timeout_min: el.max(hb * 2 + 1),
            // openraft's voters honour a leader lease as long as the upper bound, so the
            // first election after a leader dies is refused and the second wins: a
            // narrow range keeps failover near twice the timeout.
            election_timeout_max: (el * 3 / 2).max(hb * 3),
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every),
            max_in_snapshot_log_to_keep: opts.keep_behind_snapshot,
            // Purge in steps proportional to the snapshot interval.
            purge_batch_size: (opts.snapshot_every / 4).max(1),
            max_payload_entries: 64,
            // Tablet copies stream in 4 MiB chunks.
            snapshot_max_chunk_size: 4 << 20,
            install_snapshot_timeout: 10_000,
            ..Default::default()
        }
        .validate()
        .map_err(raft_err)?;
        let network = NetworkFactory::new(id.to_string(), pool);
        let raft = Raft::new(node_id, Arc::new(config), network, log.clone(), sm_store)
            .await
            .map_err(raft_err)?;
        registry.insert(id, raft.clone());
        Ok(Arc::new(RaftGroup {
            id: id.to_string(),
            node_id,
            dir: dir.to_path_buf(),
            raft,
            log,
            registry,
            election_timeout: opts.election_timeout,
            stepping_down: parking_lot::Mutex::new(None),
            ready_from: parking_lot::Mutex::new(None),
            read_round: tokio::sync::Mutex::new(None),
            lease: parking_lot::Mutex::new(None),
        }))
    }

    /// Forms the group with these voters if it has never been initialised (called on
    /// every initial member; openraft makes it idempotent).
    pub async fn bootstrap(&self, voters: BTreeMap<NodeId, Node>) -> Result<()> {
        if self.raft.is_initialized().await.map_err(raft_err)? {
            return Ok(());
        }
        match self.raft.initialize(voters).await {
            Ok(()) => Ok(()),
            Err(RaftError::APIError(e)) => {
                tracing::debug!(group = %self.id, "initialize: {e}");
                Ok(())
            }
            Err(e) => Err(raft_err(e)),
        }
    }

    /// The group id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// This member's node id.
    pub fn node_id(&self) -> NodeId {
        self.node_id
    }
    /// The group's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The openraft handle.
    pub fn raft(&self) -> &Raft {
        &self.raft
    }
    /// Bytes in the Raft log.
    pub fn log_bytes(&self) -> u64 {
        self.log.size_bytes()
    }

    fn not_leader(&self) -> ConsensusError {
        let m = self.raft.metrics().borrow().clone();
        let leader_addr = m.current_leader.and_then(|l| {
            m.membership_config
                .membership()
                .get_node(&l)
                .map(|n| n.addr.clone())
        });
        ConsensusError::NotLeader {
            leader: m.current_leader,
            leader_addr,
        }
    }

    /// The term this member leads in, if it leads. A leader tags orders it sends
    /// outside the group with it, so that their receivers can refuse those of a
    /// deposed leader. (A candidate's term is not returned: its orders would make
    /// receivers refuse those of the real leader of a lower term.)
    pub fn leader_term(&self) -> Result<u64> {
        let m = self.raft.metrics();
        let m = m.borrow();
        if m.state != ServerState::Leader {
            drop(m);
            return Err(self.not_leader());
        }
        Ok(m.current_term)
    }

    /// Ok when this member is the leader *and* has applied every entry that was in its
    /// log when its leadership began, so its state (and its clock) covers everything
    /// committed before. The watermark is taken the first time this process sees
    /// itself leading in a term — also after a restart that keeps the term.
    pub fn check_leader_ready(&self) -> Result<()> {
        let m = self.raft.metrics();
        let m = m.borrow();
        if m.state != ServerState::Leader {
            drop(m);
            return Err(self.not_leader());
        }
        let watermark = {
            let mut ready = self.ready_from.lock();
            match *ready {
                Some((term, w)) if term == m.current_term => w,
                _ => {
                    let w = m.last_log_index.unwrap_or(0);
                    *ready = Some((m.current_term, w));
                    w
                }
            }
        };
        if m.last_applied.map_or(0, |l| l.index) < watermark {
            return Err(ConsensusError::LeaderNotReady);
        }
        if self
            .stepping_down
            .lock()
            .is_some_and(|until| tokio::time::Instant::now() < until)
        {
            return Err(ConsensusError::LeaderNotReady);
        }
        Ok(())
    }

    /// Confirms that this member still leads — a round of heartbeats answered by a
    /// quorum (the read-index step of Raft §6.4, openraft's `get_read_log_id`) — and
    /// waits until it has applied everything committed when the round started. A read
    /// served afterwards is linearizable: no other leader can have committed anything
    /// it does not see. A leader cut off from its followers fails here within a
    /// heartbeat interval, never serving a stale read.
    ///
    /// Concurrent callers share rounds: a caller uses the last round if that round
    /// started after the caller arrived, else it waits for (or runs) the next one.
    ///
    /// A round also grants a *leader lease* (Raft §6.4.1) of half an election timeout
    /// from when it started, during which calls return at once. It is safe because the
    /// voters that answered the round refuse to vote for anyone else for openraft's
    /// leader lease — the upper election timeout, three times as long — after they
    /// heard from this leader, which was after the round started; any quorum that
    /// could elect a new leader includes one of them. The rest of the margin covers
    /// clocks that run at different rates. Every acknowledged write was applied here
    /// before it was acknowledged, and what earlier leaders committed was applied
    /// before this one became ready, so a leader within its lease serves linearizable
    /// reads from what it has applied.
    pub async fn confirm_leadership(&self, deadline: tokio::time::Instant) -> Result<()> {
        self.check_leader_ready()?;
        let term = self.raft.metrics().borrow().current_term;
        if let Some((t, until)) = *self.lease.lock()
            && t == term
            && tokio::time::Instant::now() < until
        {
            return Ok(());
        }
        let arrived = tokio::time::Instant::now();
        let index = {
            let mut last = tokio::time::timeout_at(deadline, self.read_round.lock())
                .await
                .map_err(|_| self.confirm_timeout())?;
            match *last {
                Some((started, index)) if started >= arrived => index,
                _ => {
                    let started = tokio::time::Instant::now();
                    let r = tokio::time::timeout_at(deadline, self.raft.get_read_log_id())
                        .await
                        .map_err(|_| self.confirm_timeout())?;
                    let index = match r {
                        Ok((read, _applied)) => read.map_or(0, |l| l.index),
                        Err(RaftError::APIError(CheckIsLeaderError::ForwardToLeader(_))) => {
                            *last = None;
                            return Err(self.not_leader());
                        }
                        Err(e) => {
                            *last = None;
                            return Err(ConsensusError::Unavailable(format!(
                                "could not confirm leadership with a quorum of the replicas: {e}"
                            )));
                        }
                    };
                    *last = Some((started, index));
                    *self.lease.lock() = Some((term, started + self.election_timeout / 2));
                    index
                }
            }
        };
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        self.wait_applied(index, left).await
    }

    fn confirm_timeout(&self) -> ConsensusError {
        ConsensusError::Unavailable(
            "timed out confirming leadership with the other replicas; retry".into(),
        )
    }

    /// Submits `data` for replication without waiting: once this returns, the entry's
    /// position in the log relative to later submissions is fixed. Await the receiver
    /// for the state machine's response.
    pub async fn submit(
        &self,
        data: Vec<u8>,
    ) -> Result<tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<crate::TypeConfig>>>
    {
        self.raft
            .client_write_ff(Request(data.into()))
            .await
            .map_err(|_| ConsensusError::ShutDown)
    }

    /// Waits for a submitted entry's response.
    pub async fn wait_response(
        &self,
        rx: tokio::sync::oneshot::Receiver<openraft::raft::ClientWriteResult<crate::TypeConfig>>,
    ) -> Result<Vec<u8>> {
        match rx.await {
            Err(_) => Err(ConsensusError::ShutDown),
            Ok(Ok(r)) => Ok(r.data.0.to_vec()),
            Ok(Err(ClientWriteError::ForwardToLeader(_))) => Err(self.not_leader()),
            Ok(Err(e)) => Err(raft_err(e)),
        }
    }

    /// Replicates `data` and returns what applying it returned.
    pub async fn propose(&self, data: Vec<u8>) -> Result<Vec<u8>> {
        let rx = self.submit(data).await?;
        self.wait_response(rx).await
    }

    /// This member's view of the group.
    pub fn status(&self) -> ReplicaStatus {
        let m = self.raft.metrics().borrow().clone();
        let role = match m.state {
            ServerState::Leader => ReplicaRole::Leader,
            ServerState::Follower => ReplicaRole::Follower,
            ServerState::Learner => ReplicaRole::Learner,
            ServerState::Candidate => ReplicaRole::Candidate,
            ServerState::Shutdown => ReplicaRole::Shutdown,
        };
        let mem = m.membership_config.membership();
        let voter_ids: BTreeSet<NodeId> = mem.voter_ids().collect();
        let mut voters = BTreeMap::new();
        let mut learners = BTreeMap::new();
        for (id, n) in mem.nodes() {
            if voter_ids.contains(id) {
                voters.insert(*id, n.addr.clone());
            } else {
                learners.insert(*id, n.addr.clone());
            }
        }
        let matched = m
            .replication
            .as_ref()
            .map(|r| {
                r.iter()
                    .filter_map(|(id, l)| l.map(|l| (*id, l.index)))
                    .collect()
            })
            .unwrap_or_default();
        ReplicaStatus {
            role,
            term: m.current_term,
            leader: m.current_leader,
            voters,
            learners,
            last_applied: m.last_applied.map_or(0, |l| l.index),
            last_log_index: m.last_log_index.unwrap_or(0),
            purged_index: m.purged.map_or(0, |l| l.index),
            matched,
        }
    }

    /// Waits until this member has applied `index` (or `timeout` passes).
    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> Result<()> {
        let mut rx = self.raft.metrics();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if rx.borrow().last_applied.map_or(0, |l| l.index) >= index {
                return Ok(());
            }
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(ConsensusError::ShutDown),
                Err(_) => {
                    return Err(ConsensusError::Unavailable(format!(
                        "the replica has not applied log index {index} within {timeout:?}; retry"
                    )));
                }
            }
        }
    }

    /// Adds `node` as a voter: first as a learner that receives the log or a tablet copy
    /// and catches up, then promoted. Leader only.
    pub async fn add_voter(&self, node_id: NodeId, addr: &str) -> Result<()> {
        self.check_leader_ready()?;
        self.raft
            .add_learner(node_id, Node::new(addr), true)
            .await
            .map_err(|e| self.membership_err(e))?;
        let mut add = BTreeSet::new();
        add.insert(node_id);
        self.raft
            .change_membership(ChangeMembers::AddVoterIds(add), false)
            .await
            .map_err(|e| self.membership_err(e))?;
        Ok(())
    }

    /// Removes a voter (or learner) from the group. Leader only.
    pub async fn remove_member(&self, node_id: NodeId) -> Result<()> {
        self.check_leader_ready()?;
        let st = self.status();
        let mut ids = BTreeSet::new();
        ids.insert(node_id);
        if st.voters.contains_key(&node_id) {
            self.raft
                .change_membership(ChangeMembers::RemoveVoters(ids.clone()), false)
                .await
                .map_err(|e| self.membership_err(e))?;
        }
        self.raft
            .change_membership(ChangeMembers::RemoveNodes(ids), false)
            .await
            .map_err(|e| self.membership_err(e))?;
        Ok(())
    }

    fn membership_err(
        &self,
        e: RaftError<NodeId, ClientWriteError<NodeId, Node>>,
    ) -> ConsensusError {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(_)) => self.not_leader(),
            e => ConsensusError::Membership(e.to_string()),
        }
    }

    /// Starts an election on this member (it wins if its log is up to date and the
    /// voters' leader lease has expired, i.e. the old leader is gone or stepped down).
    pub async fn trigger_election(&self) -> Result<()> {
        self.raft.trigger().elect().await.map_err(raft_err)
    }

    /// Leader step-down (Kudu's `LeaderStepDown`): stops sending heartbeats and refuses
    /// new writes, so that the followers' election timers fire and one of them takes
    /// over; this member does not stand for election meanwhile. Returns at once;
    /// normal operation resumes when another leader appears or after six election
    /// timeouts.
    pub fn step_down(self: &Arc<Self>) -> Result<()> {
        self.check_leader_ready()?;
        let until = tokio::time::Instant::now() + self.election_timeout * 6;
        *self.stepping_down.lock() = Some(until);
        *self.lease.lock() = None;
        self.raft.runtime_config().heartbeat(false);
        self.raft.runtime_config().elect(false);
        let me = self.clone();
        tokio::spawn(async move {
            let mut rx = me.raft.metrics();
            loop {
                let other = {
                    let m = rx.borrow();
                    m.current_leader.is_some_and(|l| l != me.node_id)
                };
                if other || tokio::time::Instant::now() >= until {
                    break;
                }
                let _ = tokio::time::timeout_at(until, rx.changed()).await;
            }
            me.raft.runtime_config().heartbeat(true);
            me.raft.runtime_config().elect(true);
            *me.stepping_down.lock() = None;
        });
        Ok(())
    }

    /// Stops the group and unregisters it.
    pub async fn shutdown(&self) {
        self.registry.remove(&self.id);
        let _ = self.raft.shutdown().await;
    }
}
