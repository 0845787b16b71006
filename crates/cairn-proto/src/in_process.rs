//! The tablet-server service without the network, for a client in the server's own
//! process.
//!
//! `cairn local` (and a tablet server that also serves SQL) runs the SQL engine, and so
//! a client, in the same process as its tablet servers. Sending
//! their scans and writes through gRPC there costs an Arrow IPC encode, HTTP/2 framing,
//! two socket copies and an IPC decode per batch — about a quarter of the CPU of a
//! large scan. A server registered with the client's
//! `register_in_process` is called directly instead: scans hand over the server's Arrow batches as they are, writes skip
//! the network. Everything else (leader discovery, retries, resuming scans on another
//! replica, timeouts) is the same as for a remote server, because the calls take and
//! return the same protocol messages and `tonic::Status` errors.

use crate::pb::{BulkInsertRequest, ScanRequest, ScanResponse, WriteRequest, WriteResponse};
use arrow::array::RecordBatch;
use futures::future::BoxFuture;
use tonic::Status;

/// One scan call's answer from an in-process server: the response with its
/// `arrow_ipc` left empty, and the rows as Arrow batches.
#[derive(Debug)]
pub struct InProcessScan {
    /// Scanner id, `has_more`, snapshot and last key, as on the wire.
    pub response: ScanResponse,
    /// The rows (possibly none).
    pub batches: Vec<RecordBatch>,
}

/// A tablet server a client can call without the network (implemented by
/// `cairn-tserver`'s service). Errors are the `Status` the gRPC service would have
/// returned, leader hints included.
pub trait InProcessTabletServer: Send + Sync {
    /// The `Scan` RPC, with the rows as batches.
    fn scan(&self, req: ScanRequest) -> BoxFuture<'static, Result<InProcessScan, Status>>;
    /// The `Write` RPC.
    fn write(&self, req: WriteRequest) -> BoxFuture<'static, Result<WriteResponse, Status>>;
    /// The `TxnControl` RPC.
    fn txn_control(
        &self,
        req: crate::TxnControlRequest,
    ) -> BoxFuture<'static, Result<crate::TxnControlResponse, Status>>;
    /// The `Get` RPC.
    fn get(&self, req: crate::GetRequest)
    -> BoxFuture<'static, Result<crate::GetResponse, Status>>;
    /// The `BulkInsert` RPC, with the rows as a batch (`req.arrow_ipc` is ignored).
    fn bulk_insert(
        &self,
        req: BulkInsertRequest,
        rows: RecordBatch,
    ) -> BoxFuture<'static, Result<WriteResponse, Status>>;
}
