//! Deadlines, exponential backoff with jitter, and one RPC attempt under a timeout.

use std::future::Future;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;
use tonic::Status;

use crate::error::ClientError;

/// Exponential backoff between retries: the base delay starts at [`Backoff::INITIAL`]
/// and doubles up to [`Backoff::MAX`]; each delay is drawn uniformly from
/// `[base / 2, base]` ("equal jitter"), so clients that failed together do not retry
/// together.
#[derive(Debug, Clone)]
pub(crate) struct Backoff {
    base: Duration,
}

impl Backoff {
    /// First base delay.
    pub(crate) const INITIAL: Duration = Duration::from_millis(50);
    /// Largest base delay.
    pub(crate) const MAX: Duration = Duration::from_millis(500);

    pub(crate) fn new() -> Self {
        Backoff {
            base: Self::INITIAL,
        }
    }

    /// The next delay to sleep.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let base = self.base;
        self.base = (base * 2).min(Self::MAX);
        let half = base / 2;
        let jitter_ns = rand::rng().random_range(0..=half.as_nanos() as u64);
        half + Duration::from_nanos(jitter_ns)
    }
}

/// The point in time an operation must finish by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    end: Instant,
    total: Duration,
}

impl Deadline {
    /// `total` from now.
    pub(crate) fn after(total: Duration) -> Self {
        Deadline {
            end: Instant::now() + total,
            total,
        }
    }

    /// Time left (zero once passed).
    pub(crate) fn remaining(&self) -> Duration {
        self.end.saturating_duration_since(Instant::now())
    }

    pub(crate) fn expired(&self) -> bool {
        self.remaining().is_zero()
    }

    /// The timeout of one attempt: `rpc_timeout`, but never past the deadline.
    pub(crate) fn rpc_timeout(&self, rpc_timeout: Duration) -> Duration {
        rpc_timeout
            .min(self.remaining())
            .max(Duration::from_millis(1))
    }

    /// Sleeps the backoff's next delay, cut short at the deadline. Returns false when the
    /// deadline has passed (the caller gives up).
    pub(crate) async fn backoff(&self, b: &mut Backoff) -> bool {
        let d = b.next_delay().min(self.remaining());
        if !d.is_zero() {
            tokio::time::sleep(d).await;
        }
        !self.expired()
    }

    /// The timeout error for `what`, with the last transient error.
    pub(crate) fn timeout_error(
        &self,
        what: impl Into<String>,
        last: impl Into<String>,
    ) -> ClientError {
        let last = last.into();
        ClientError::Timeout {
            what: what.into(),
            timeout: self.total,
            last: if last.is_empty() {
                "none (no attempt finished)".into()
            } else {
                last
            },
        }
    }
}

/// Builds a request carrying a gRPC timeout header.
pub(crate) fn request<T>(msg: T, timeout: Duration) -> tonic::Request<T> {
    let mut r = tonic::Request::new(msg);
    r.set_timeout(timeout);
    r
}

/// Runs one RPC attempt, failing with `DEADLINE_EXCEEDED` if no reply comes within
/// `timeout` (the header alone does not bound a hung connection).
pub(crate) async fn attempt<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<tonic::Response<T>, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(resp)) => Ok(resp.into_inner()),
        Ok(Err(status)) => Err(status),
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no reply within {timeout:?}"
        ))),
    }
}

/// [`attempt`] for a call to an in-process server (no `tonic::Response` around the
/// reply).
pub(crate) async fn attempt_in_process<T>(
    timeout: Duration,
    fut: impl Future<Output = Result<T, Status>>,
) -> Result<T, Status> {
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(Status::deadline_exceeded(format!(
            "no reply within {timeout:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_within_bounds_and_grows() {
        for _ in 0..50 {
            let mut b = Backoff::new();
            let mut base = Backoff::INITIAL;
            for _ in 0..20 {
                let d = b.next_delay();
                assert!(
                    d >= base / 2 && d <= base,
                    "{d:?} outside [{:?}, {base:?}]",
                    base / 2
                );
                assert!(d >= Backoff::INITIAL / 2 && d <= Backoff::MAX);
                base = (base * 2).min(Backoff::MAX);
            }
            // After enough failures the delay sits in the capped band.
            let d = b.next_delay();
            assert!(d >= Backoff::MAX / 2);
        }
        // Jitter: delays are not all equal.
        let mut b = Backoff::new();
        for _ in 0..10 {
            b.next_delay();
        }
        let ds: std::collections::HashSet<Duration> = (0..20).map(|_| b.next_delay()).collect();
        assert!(ds.len() > 1);
    }

    #[tokio::test]
    async fn deadline_cuts_backoff_short() {
        let d = Deadline::after(Duration::from_millis(30));
        let mut b = Backoff::new();
        let start = Instant::now();
        while d.backoff(&mut b).await {}
        let took = start.elapsed();
        assert!(took >= Duration::from_millis(30) && took < Duration::from_millis(500));
        assert!(d.expired());
        assert_eq!(
            d.rpc_timeout(Duration::from_secs(10)),
            Duration::from_millis(1)
        );
        assert!(matches!(
            d.timeout_error("x", ""),
            ClientError::Timeout { .. }
        ));
    }
}
