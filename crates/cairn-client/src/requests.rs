//! Request ids for exactly-once writes and DDL (Kudu's `RequestTracker`).
//!
//! Each [`Client`](crate::Client) (and its clones) has a random client id. Every write
//! request to a tablet, every bulk-insert chunk and every DDL call takes the next
//! sequence number from [`RequestTracker::start`]; all retries of that request carry the
//! same id, so the server answers a retry with the first attempt's answer instead of
//! applying it twice (or reporting ALREADY_PRESENT / NOT_FOUND caused by the first
//! attempt). The id also carries the smallest sequence number still in progress, so
//! servers can forget the answers of everything below it.

use std::collections::BTreeSet;
use std::sync::Arc;

use cairn_proto::RequestId;
use parking_lot::Mutex;

/// The client's id and its requests in progress.
#[derive(Debug)]
pub struct RequestTracker {
    client_id: String,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    next: u64,
    incomplete: BTreeSet<u64>,
}

/// One request in progress; completed when dropped (answered, or given up).
#[derive(Debug)]
pub struct Request {
    tracker: Arc<RequestTracker>,
    seq_no: u64,
}

impl RequestTracker {
    /// A tracker with a fresh random client id.
    pub fn new() -> Arc<RequestTracker> {
        Arc::new(RequestTracker {
            client_id: format!("{:032x}", rand::random::<u128>()),
            state: Mutex::new(State {
                next: 1,
                incomplete: BTreeSet::new(),
            }),
        })
    }

    /// The client id.
    pub fn client_id(&self) -> &str {
        &self.client_id
    }

    /// Starts a request: its sequence number stays "in progress" until the returned
    /// guard is dropped.
    pub fn start(self: &Arc<Self>) -> Request {
        let mut s = self.state.lock();
        let seq_no = s.next;
        s.next += 1;
        s.incomplete.insert(seq_no);
        Request {
            tracker: self.clone(),
            seq_no,
        }
    }
}

impl Request {
    /// The wire id of this request, with the client's current first incomplete number.
    pub fn id(&self) -> RequestId {
        let s = self.tracker.state.lock();
        RequestId {
            client_id: self.tracker.client_id.clone(),
            seq_no: self.seq_no,
            first_incomplete_seq_no: s.incomplete.first().copied().unwrap_or(s.next),
        }
    }

    /// The request's sequence number.
    pub fn seq_no(&self) -> u64 {
        self.seq_no
    }
}

impl Drop for Request {
    fn drop(&mut self) {
        self.tracker.state.lock().incomplete.remove(&self.seq_no);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_incomplete_follows_the_oldest_request_in_progress() {
        let t = RequestTracker::new();
        let a = t.start();
        let b = t.start();
        assert_eq!(a.id().seq_no, 1);
        assert_eq!(b.id().seq_no, 2);
        assert_eq!(b.id().first_incomplete_seq_no, 1);
        drop(a);
        assert_eq!(b.id().first_incomplete_seq_no, 2);
        drop(b);
        let c = t.start();
        assert_eq!(c.id().first_incomplete_seq_no, 3);
        assert_eq!(c.id().client_id.len(), 32);
        assert_ne!(RequestTracker::new().client_id(), t.client_id());
    }
}
