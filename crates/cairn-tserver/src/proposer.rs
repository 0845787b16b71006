//! Group commit: the leader's queue of records on their way into the Raft log.
//!
//! Every record a leader proposes — row writes, transaction steps, bulk inserts,
//! schema changes — takes its timestamp under the replica's proposal lock and is
//! queued here under the same lock, so the queue is in timestamp order, which is the
//! order the log must have. One flusher task at a time empties the queue into the
//! log. Consecutive row writes ([`cairn_tablet::ops::LogRecord::Write`] and
//! `TxnWrite`) go in as one entry ([`cairn_tablet::ops::encode_batch`]); any other
//! record goes alone.
//!
//! The flusher keeps at most [`MAX_ENTRIES_IN_FLIGHT`] entries replicating at a time.
//! While they are appended, fsynced, replicated and applied, the writers that arrive
//! meanwhile queue up, and the next entry takes all of them: concurrent writes on a
//! tablet share one log append and one fsync (Kudu's group commit), and a lone write
//! still goes out at once. openraft appends and fsyncs each entry by itself, so this
//! is the only place where writes can share an fsync.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use cairn_consensus::{ConsensusError, RaftGroup};
use cairn_tablet::ops::encode_batch;
use parking_lot::Mutex;
use tokio::sync::{Semaphore, oneshot};

/// Entries of one replica replicating at once. One: the writers that arrive while an
/// entry is appended, fsynced, replicated and applied all share the next entry and its
/// fsync. With two in flight the entries were smaller and the fsyncs more frequent, and
/// on this project's 2-core test machine an fsync costs the server about 100 µs of CPU
/// (the block layer and the virtual disk's notification): one in flight gave 10–15%
/// more keyed writes per second under 16 writers.
pub const MAX_ENTRIES_IN_FLIGHT: usize = 1;
/// At most this many records go into one entry.
const MAX_BATCH_RECORDS: usize = 512;
/// A batch is closed once it holds this many bytes.
const MAX_BATCH_BYTES: usize = 4 << 20;

/// What applying a queued record returned (the tablet's encoded answer).
pub type Answer = std::result::Result<Vec<u8>, ConsensusError>;

/// A record waiting for the log.
struct Queued {
    record: Vec<u8>,
    /// A row write, which may share an entry with its neighbours.
    batchable: bool,
    answer: oneshot::Sender<Answer>,
}

#[derive(Default)]
struct State {
    queue: VecDeque<Queued>,
    /// A flusher task is running.
    flushing: bool,
}

/// One replica's queue of proposals (see the module docs).
pub struct Proposer {
    group: Arc<RaftGroup>,
    state: Mutex<State>,
    in_flight: Arc<Semaphore>,
    /// Log entries submitted, and the records they held.
    entries: AtomicU64,
    records: AtomicU64,
}

/// What a [`Proposer`] has done: how much group commit saved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProposerStats {
    /// Log entries submitted.
    pub entries: u64,
    /// Records they held (more than `entries` when writes shared entries).
    pub records: u64,
}

impl Proposer {
    /// The queue of `group`.
    pub fn new(group: Arc<RaftGroup>) -> Arc<Proposer> {
        Arc::new(Proposer {
            group,
            state: Mutex::new(State::default()),
            in_flight: Arc::new(Semaphore::new(MAX_ENTRIES_IN_FLIGHT)),
            entries: AtomicU64::new(0),
            records: AtomicU64::new(0),
        })
    }

    /// Entries and records submitted so far.
    pub fn stats(&self) -> ProposerStats {
        ProposerStats {
            entries: self.entries.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
        }
    }

    /// Queues `record` for the log; the receiver gets what applying it returned, or
    /// why it was not replicated (this replica lost its leadership, or shut down).
    /// `batchable`: a row write, which may share its entry.
    ///
    /// REQUIRES: the replica's proposal-order lock, held since the record took its
    /// timestamp, and a Tokio runtime.
    pub fn submit(self: &Arc<Self>, record: Vec<u8>, batchable: bool) -> oneshot::Receiver<Answer> {
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut s = self.state.lock();
            s.queue.push_back(Queued {
                record,
                batchable,
                answer: tx,
            });
            !std::mem::replace(&mut s.flushing, true)
        };
        if start {
            tokio::spawn(self.clone().flush());
        }
        rx
    }

    /// Empties the queue into the log, one entry at a time, while entries are in
    /// flight up to the bound; ends when the queue is empty.
    async fn flush(self: Arc<Self>) {
        loop {
            let Ok(permit) = self.in_flight.clone().acquire_owned().await else {
                return;
            };
            let entry = {
                let mut s = self.state.lock();
                let Some(first) = s.queue.pop_front() else {
                    s.flushing = false;
                    return;
                };
                let mut entry = vec![first];
                if entry[0].batchable {
                    let mut bytes = entry[0].record.len();
                    while entry.len() < MAX_BATCH_RECORDS
                        && bytes < MAX_BATCH_BYTES
                        && s.queue.front().is_some_and(|q| q.batchable)
                    {
                        let Some(next) = s.queue.pop_front() else {
                            break;
                        };
                        bytes += next.record.len();
                        entry.push(next);
                    }
                }
                entry
            };
            let (payload, answers): (Vec<u8>, Vec<oneshot::Sender<Answer>>) = if entry.len() == 1 {
                let q = entry.into_iter().next().expect("one record");
                (q.record, vec![q.answer])
            } else {
                let mut records = Vec::with_capacity(entry.len());
                let mut answers = Vec::with_capacity(entry.len());
                for q in entry {
                    records.push(q.record);
                    answers.push(q.answer);
                }
                (encode_batch(&records), answers)
            };
            let batched = answers.len() > 1;
            self.entries.fetch_add(1, Ordering::Relaxed);
            self.records
                .fetch_add(answers.len() as u64, Ordering::Relaxed);
            match self.group.submit(payload).await {
                Err(e) => {
                    drop(permit);
                    answer_all(answers, Err(e));
                }
                Ok(rx) => {
                    let group = self.group.clone();
                    tokio::spawn(async move {
                        let res = group.wait_response(rx).await;
                        drop(permit);
                        match res {
                            Ok(bytes) if batched => match split_answers(&bytes, answers.len()) {
                                Ok(parts) => {
                                    for (tx, part) in answers.into_iter().zip(parts) {
                                        let _ = tx.send(Ok(part));
                                    }
                                }
                                Err(e) => answer_all(answers, Err(e)),
                            },
                            res => answer_all(answers, res),
                        }
                    });
                }
            }
        }
    }
}

/// Sends one answer to every record of an entry (errors are rebuilt for each).
fn answer_all(answers: Vec<oneshot::Sender<Answer>>, res: Answer) {
    for tx in answers {
        let copy = match &res {
            Ok(b) => Ok(b.clone()),
            Err(e) => Err(copy_error(e)),
        };
        let _ = tx.send(copy);
    }
}

/// A copy of `e` for another waiter (I/O errors become their message).
fn copy_error(e: &ConsensusError) -> ConsensusError {
    match e {
        ConsensusError::NotLeader {
            leader,
            leader_addr,
        } => ConsensusError::NotLeader {
            leader: *leader,
            leader_addr: leader_addr.clone(),
        },
        ConsensusError::LeaderNotReady => ConsensusError::LeaderNotReady,
        ConsensusError::ShutDown => ConsensusError::ShutDown,
        ConsensusError::Unavailable(m) => ConsensusError::Unavailable(m.clone()),
        other => ConsensusError::Raft(other.to_string()),
    }
}

/// Frames the answers of a batch entry's records (see [`split_answers`]).
pub fn join_answers(parts: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + parts.iter().map(|p| p.len() + 4).sum::<usize>());
    cairn_common::codec::put_u32(&mut out, parts.len() as u32);
    for p in parts {
        cairn_common::codec::put_bytes(&mut out, p);
    }
    out
}

/// The `n` answers framed by [`join_answers`].
fn split_answers(bytes: &[u8], n: usize) -> std::result::Result<Vec<Vec<u8>>, ConsensusError> {
    let bad = |e: cairn_common::CommonError| ConsensusError::Decode(format!("batch answer: {e}"));
    let mut r = cairn_common::codec::Reader::new(bytes, "batch answer");
    let count = r.u32().map_err(bad)? as usize;
    if count != n {
        return Err(ConsensusError::Decode(format!(
            "a batch of {n} records was answered {count} times"
        )));
    }
    (0..n)
        .map(|_| r.bytes().map(<[u8]>::to_vec).map_err(bad))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_round_trip() {
        let parts = vec![vec![1, 2, 3], vec![], vec![9]];
        assert_eq!(split_answers(&join_answers(&parts), 3).unwrap(), parts);
        assert!(split_answers(&join_answers(&parts), 2).is_err());
        assert!(split_answers(&[1, 0, 0], 1).is_err());
    }
}
