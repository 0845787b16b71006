//! The result tracker: answers of applied client requests, so that a retried request
//! gets its first answer instead of running twice (Kudu's `ResultTracker`).
//!
//! A client names every write with a [`RequestId`] (its id and a sequence number) and
//! retries with the same id after a timeout or a leader change. The answer is recorded
//! when the write's log record is *applied*, on every replica, so a new leader knows the
//! answers of everything its log holds; and it is persisted with the tablet's metadata,
//! so it survives restarts and tablet copies. Applying a record whose request already
//! has an answer from a *different* log index (a duplicate that reached the log twice)
//! changes nothing and returns the recorded answer.
//!
//! What is kept: for each client, the answers of requests at or above the client's
//! `first_incomplete_seq_no` (it has the answers of everything below). Clients silent
//! for [`CLIENT_TTL_MICROS`] of log time are forgotten, as Kudu forgets them after its
//! `remember_clients_ttl_ms`; a retry later than that may run again.

use std::collections::{BTreeMap, HashMap};

use cairn_common::HybridTime;
use parking_lot::Mutex;

use crate::ops::{RequestId, RowError};

/// How long (in log time) a silent client's answers are kept: one hour.
pub const CLIENT_TTL_MICROS: u64 = 3_600_000_000;

/// The answer to one applied request.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct CachedAnswer {
    /// The log index of the record that produced it.
    pub index: u64,
    /// The write's timestamp.
    pub ts: u64,
    /// Row errors by position in the client's batch.
    pub errors: Vec<(usize, RowError)>,
}

/// One client's remembered answers.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ClientAnswers {
    /// The client.
    pub client_id: String,
    /// Log time of its latest request (HybridTime).
    pub last_seen: u64,
    /// Requests below this have been answered and are forgotten.
    pub first_incomplete: u64,
    /// Answers by sequence number.
    pub answers: BTreeMap<u64, CachedAnswer>,
}

/// The answers of one tablet's applied requests.
#[derive(Debug, Default)]
pub struct ResultTracker {
    clients: Mutex<HashMap<String, ClientAnswers>>,
    /// Log time of the last expiry sweep.
    last_sweep: Mutex<u64>,
}

impl ResultTracker {
    /// A tracker holding `clients` (as persisted).
    pub fn from_persisted(clients: Vec<ClientAnswers>) -> Self {
        ResultTracker {
            clients: Mutex::new(
                clients
                    .into_iter()
                    .map(|c| (c.client_id.clone(), c))
                    .collect(),
            ),
            last_sweep: Mutex::new(0),
        }
    }

    /// The recorded answer of `id`, if any.
    pub fn get(&self, id: &RequestId) -> Option<CachedAnswer> {
        self.clients
            .lock()
            .get(&id.client_id)
            .and_then(|c| c.answers.get(&id.seq_no).cloned())
    }

    /// Records the answer of `id`, applied at log time `ts`, and forgets what the client
    /// says it no longer needs. An answer for a request below the client's
    /// `first_incomplete` is not recorded (its client has moved on).
    pub fn record(&self, id: &RequestId, answer: CachedAnswer, ts: HybridTime) {
        let mut clients = self.clients.lock();
        let c = clients
            .entry(id.client_id.clone())
            .or_insert_with(|| ClientAnswers {
                client_id: id.client_id.clone(),
                ..Default::default()
            });
        c.last_seen = c.last_seen.max(ts.0);
        if id.first_incomplete_seq_no > c.first_incomplete {
            c.first_incomplete = id.first_incomplete_seq_no;
            let keep = c.answers.split_off(&c.first_incomplete);
            c.answers = keep;
        }
        if id.seq_no >= c.first_incomplete {
            c.answers.entry(id.seq_no).or_insert(answer);
        }
        let ttl = CLIENT_TTL_MICROS << cairn_common::clock::LOGICAL_BITS;
        let mut last = self.last_sweep.lock();
        if ts.0.saturating_sub(*last) > ttl / 60 {
            *last = ts.0;
            let cutoff = ts.0.saturating_sub(ttl);
            clients.retain(|_, c| c.last_seen >= cutoff);
        }
    }

    /// Everything remembered, for the metadata file.
    pub fn to_persist(&self) -> Vec<ClientAnswers> {
        let mut v: Vec<ClientAnswers> = self.clients.lock().values().cloned().collect();
        v.sort_by(|a, b| a.client_id.cmp(&b.client_id));
        v
    }

    /// Number of remembered answers.
    pub fn len(&self) -> usize {
        self.clients.lock().values().map(|c| c.answers.len()).sum()
    }

    /// Whether nothing is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(seq: u64, first: u64) -> RequestId {
        RequestId {
            client_id: "c".into(),
            seq_no: seq,
            first_incomplete_seq_no: first,
        }
    }

    fn answer(index: u64) -> CachedAnswer {
        CachedAnswer {
            index,
            ts: 0,
            errors: vec![(0, RowError::AlreadyPresent)],
        }
    }

    #[test]
    fn remembers_until_the_client_moves_on() {
        let t = ResultTracker::default();
        let ts = HybridTime::from_micros(1_000_000);
        t.record(&id(1, 1), answer(10), ts);
        t.record(&id(2, 1), answer(11), ts);
        assert_eq!(t.get(&id(1, 1)).unwrap().index, 10);
        // A second answer for the same request does not replace the first.
        t.record(&id(1, 1), answer(99), ts);
        assert_eq!(t.get(&id(1, 1)).unwrap().index, 10);
        // The client has the answers below 2: the first is forgotten.
        t.record(&id(3, 2), answer(12), ts);
        assert!(t.get(&id(1, 1)).is_none());
        assert_eq!(t.get(&id(2, 2)).unwrap().index, 11);
        // An answer below first_incomplete is not resurrected.
        t.record(&id(1, 1), answer(13), ts);
        assert!(t.get(&id(1, 1)).is_none());
        // Persisted and restored.
        let back = ResultTracker::from_persisted(t.to_persist());
        assert_eq!(back.get(&id(3, 2)).unwrap().index, 12);
        assert_eq!(back.len(), 2);
    }

    #[test]
    fn silent_clients_expire() {
        let t = ResultTracker::default();
        let t0 = HybridTime::from_micros(1_000_000);
        t.record(&id(1, 1), answer(1), t0);
        let later = HybridTime::from_micros(1_000_000 + CLIENT_TTL_MICROS + 120_000_000);
        let other = RequestId {
            client_id: "d".into(),
            seq_no: 1,
            first_incomplete_seq_no: 1,
        };
        t.record(&other, answer(2), later);
        assert!(t.get(&id(1, 1)).is_none());
        assert!(t.get(&other).is_some());
    }
}
