//! [`CairnCodec`]: how a [`CairnScanExec`] crosses the network to a worker.
//!
//! A scan travels as what it reads: the table handle (at the schema the statement
//! was planned at), its share of the tablets with their replicas, the projection,
//! the predicates the tablet servers evaluate, the limit, the declared hash
//! partitioning and the statement's snapshot, which the coordinator fixed before
//! the plan left it. The worker rebuilds the scan on its own cluster client and
//! reads at that snapshot, so every fragment of one query sees the same data.
//! Dynamic filters (a hash join's build side) stay behind: they are hints, and
//! their producer may run in another process.
//!
//! A share of a distributed insert ([`CairnWriteShareExec`]) travels as its table,
//! insert mode, transaction id and batch sizes; its input travels as a plan of its
//! own. Each encoded node starts with a byte naming its kind.

use std::sync::Arc;

use cairn_client::{Client, Table, TabletLocationInfo};
use cairn_common::ColumnPredicate;
use datafusion::arrow::datatypes::Schema as ArrowSchema;
use datafusion::common::{Result, internal_datafusion_err, internal_err};
use datafusion::execution::TaskContext;
use datafusion::physical_plan::ExecutionPlan;
use datafusion_proto::physical_plan::{PhysicalExtensionCodec, PhysicalProtoConverterExtension};
use prost::Message;

use crate::options::{InsertMode, StatementContext};
use crate::partitioning::HashIdentity;
use crate::scan::{CairnScanExec, ScanSpec};

use super::writes::{CairnWriteShareExec, ShareWire};

/// Encodes and decodes Cairn's execution plan nodes for distributed execution; the
/// coordinator and every worker register one (DataFusion's own nodes need none).
#[derive(Debug, Clone)]
pub struct CairnCodec {
    /// The cluster client decoded scans read with.
    client: Client,
}

impl CairnCodec {
    /// A codec whose decoded scans read through `client`.
    pub fn new(client: Client) -> Self {
        CairnCodec { client }
    }
}

/// The parts of a scan other than its Arrow schema (which travels as DataFusion's
/// protobuf schema).
#[derive(serde::Serialize, serde::Deserialize)]
struct ScanWire {
    /// [`Table::to_bytes`].
    table: Vec<u8>,
    tablets: Vec<TabletLocationInfo>,
    total_tablets: usize,
    columns: Vec<String>,
    predicates: Vec<ColumnPredicate>,
    limit: Option<usize>,
    hash: Option<(Vec<usize>, HashIdentity)>,
    /// The statement's snapshot; `None` only for a scan of no tablet.
    snapshot: Option<u64>,
    pad_to: usize,
    read_from: Option<String>,
}

impl PhysicalExtensionCodec for CairnCodec {
    fn try_decode(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
        _ctx: &TaskContext,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        match buf.split_first() {
            Some((&SCAN, rest)) => self.decode_scan(rest, inputs),
            Some((&WRITE_SHARE, rest)) => self.decode_share(rest, inputs),
            _ => internal_err!("a Cairn plan node arrived damaged (unknown kind)"),
        }
    }

    fn try_encode(
        &self,
        node: Arc<dyn ExecutionPlan>,
        buf: &mut Vec<u8>,
        _proto_converter: &dyn PhysicalProtoConverterExtension,
    ) -> Result<()> {
        if let Some(scan) = node.downcast_ref::<CairnScanExec>() {
            buf.push(SCAN);
            return encode_scan(scan, buf);
        }
        if let Some(share) = node.downcast_ref::<CairnWriteShareExec>() {
            buf.push(WRITE_SHARE);
            let json = serde_json::to_vec(&share.wire()).map_err(|e| {
                internal_datafusion_err!("cannot encode a share of a distributed insert: {e}")
            })?;
            buf.extend_from_slice(&json);
            return Ok(());
        }
        internal_err!("{} cannot run on another server", node.name())
    }
}

/// The first byte of an encoded [`CairnScanExec`].
const SCAN: u8 = b'S';
/// The first byte of an encoded [`CairnWriteShareExec`].
const WRITE_SHARE: u8 = b'W';

impl CairnCodec {
    /// A share of a distributed insert, writing through this codec's client.
    fn decode_share(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let [input] = inputs else {
            return internal_err!(
                "a share of a distributed insert has one input, got {}",
                inputs.len()
            );
        };
        let bad = |e: &dyn std::fmt::Display| {
            internal_datafusion_err!("a share of a distributed insert arrived damaged: {e}")
        };
        let wire: ShareWire = serde_json::from_slice(buf).map_err(|e| bad(&e))?;
        let share = CairnWriteShareExec::from_wire(self.client.clone(), wire, Arc::clone(input))
            .map_err(|e| bad(&e))?;
        Ok(Arc::new(share))
    }

    /// A scan, reading through this codec's client.
    fn decode_scan(
        &self,
        buf: &[u8],
        inputs: &[Arc<dyn ExecutionPlan>],
    ) -> Result<Arc<dyn ExecutionPlan>> {
        if !inputs.is_empty() {
            return internal_err!("a Cairn scan has no inputs, got {}", inputs.len());
        }
        let bad = |what: &str, e: &dyn std::fmt::Display| {
            internal_datafusion_err!("a Cairn scan arrived damaged ({what}): {e}")
        };
        let (Some(len), rest) = (buf.get(..4), buf.get(4..).unwrap_or_default()) else {
            return Err(bad("length", &"too short"));
        };
        let len = u32::from_le_bytes([len[0], len[1], len[2], len[3]]) as usize;
        if rest.len() < len {
            return Err(bad("length", &"too short"));
        }
        let wire: ScanWire = serde_json::from_slice(&rest[..len]).map_err(|e| bad("spec", &e))?;
        let schema = datafusion_proto::protobuf::Schema::decode(&rest[len..])
            .map_err(|e| bad("schema", &e))?;
        let schema: ArrowSchema = (&schema).try_into().map_err(|e| bad("schema", &e))?;
        let table = Table::from_bytes(&wire.table).map_err(|e| bad("table", &e))?;
        let tablet_stats = vec![None; wire.tablets.len()];
        let spec = ScanSpec {
            client: self.client.clone(),
            table,
            tablets: wire.tablets,
            total_tablets: wire.total_tablets,
            tablet_stats,
            columns: wire.columns,
            predicates: wire.predicates,
            limit: wire.limit,
            hash: wire.hash,
            statement: StatementContext::new(wire.snapshot, InsertMode::Insert),
            schema: Arc::new(schema),
            pad_to: wire.pad_to,
            read_from: wire.read_from,
        };
        Ok(Arc::new(CairnScanExec::new(spec)))
    }
}

/// Appends `scan` to `buf`: the length of its JSON spec, the spec, its schema.
fn encode_scan(scan: &CairnScanExec, buf: &mut Vec<u8>) -> Result<()> {
    let s = scan.spec();
    // The coordinator fixed the snapshot before distributing.
    let snapshot = s.statement.chosen_snapshot.known();
    if snapshot.is_none() && !s.tablets.is_empty() {
        return internal_err!(
            "the snapshot of a scan of {} was not fixed before it was sent to a worker",
            s.table.name
        );
    }
    let wire = ScanWire {
        table: s.table.to_bytes(),
        tablets: s.tablets.clone(),
        total_tablets: s.total_tablets,
        columns: s.columns.clone(),
        predicates: s.predicates.clone(),
        limit: s.limit,
        hash: s.hash.clone(),
        snapshot,
        pad_to: s.pad_to,
        read_from: s.read_from.clone(),
    };
    let json = serde_json::to_vec(&wire)
        .map_err(|e| internal_datafusion_err!("cannot encode a Cairn scan: {e}"))?;
    let schema: datafusion_proto::protobuf::Schema = s.schema.as_ref().try_into()?;
    buf.extend_from_slice(&(json.len() as u32).to_le_bytes());
    buf.extend_from_slice(&json);
    schema
        .encode(buf)
        .map_err(|e| internal_datafusion_err!("cannot encode a Cairn scan's schema: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::distributed::tasks::tests::scan_of;
    use datafusion::physical_plan::displayable;
    use datafusion_proto::physical_plan::DefaultPhysicalProtoConverter;

    #[tokio::test]
    async fn a_scan_arrives_as_it_left() {
        let scan = scan_of(&["a:1", "b:1", "c:1"], true).await;
        let share: Arc<dyn ExecutionPlan> = Arc::new(scan.share(&[0, 2], 2, Some("c:1".into())));
        let codec = CairnCodec::new(scan.spec().client.clone());
        let mut buf = vec![];
        codec
            .try_encode(share.clone(), &mut buf, &DefaultPhysicalProtoConverter {})
            .unwrap();
        let ctx = TaskContext::default();
        let back = codec
            .try_decode(&buf, &[], &ctx, &DefaultPhysicalProtoConverter {})
            .unwrap();
        let show = |p: &Arc<dyn ExecutionPlan>| displayable(p.as_ref()).one_line().to_string();
        // Same tablets, projection, predicates, hash, padding and leaders; the
        // snapshot becomes the worker's fixed one.
        assert_eq!(
            show(&back).replace(", snapshot=12345", ""),
            show(&share),
            "{}",
            show(&back)
        );
        assert!(show(&back).contains("snapshot=12345"));
        assert_eq!(back.schema(), share.schema());
        assert_eq!(
            back.properties().partitioning.partition_count(),
            share.properties().partitioning.partition_count()
        );
        // Damaged bytes are an error, not a panic.
        assert!(
            codec
                .try_decode(&buf[..10], &[], &ctx, &DefaultPhysicalProtoConverter {})
                .is_err()
        );
    }

    #[tokio::test]
    async fn a_scan_without_a_snapshot_is_not_sent() {
        let scan = scan_of(&["a:1", "b:1"], false).await;
        *scan.spec().statement.chosen_snapshot.lock().await = None;
        let mut buf = vec![];
        let err = CairnCodec::new(scan.spec().client.clone())
            .try_encode(Arc::new(scan), &mut buf, &DefaultPhysicalProtoConverter {})
            .unwrap_err();
        assert!(err.to_string().contains("snapshot"), "{err}");
    }
}
