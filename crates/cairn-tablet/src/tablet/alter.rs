//! Schema changes. Columns have stable ids, so no data is rewritten: the MemRowSet is
//! flushed under the old schema while appliers wait, the new schema is recorded, and
//! files written under any earlier version stay readable by id.

use std::sync::Arc;

use super::Tablet;
use crate::error::Result;
use crate::metadata::SchemaMeta;
use crate::ops::LogRecord;
use cairn_common::HybridTime;
use cairn_common::schema::AlterOp;

impl Tablet {
    /// Encodes the record of a schema change, to replicate.
    pub fn prepare_alter(&self, op: &AlterOp) -> Result<Vec<u8>> {
        let new = self.schema().altered(op)?;
        Ok(LogRecord::AlterSchema {
            schema: SchemaMeta::from_schema(&new),
        }
        .encode())
    }

    /// Applies a schema change logged at `index` (a no-op if the tablet already has
    /// that version or a later one). Appliers stay blocked from the flush's cut until
    /// the new schema is in place, so no row reaches the MemRowSet under the old
    /// column layout. Skip caches are cleared: a dropped column's name may come back
    /// as a new column.
    pub(crate) fn apply_alter(&self, index: u64, schema: SchemaMeta) -> Result<()> {
        let _m = self.maint_lock()?;
        if schema.version > self.schema().version() {
            let new = schema.to_schema()?;
            let (_, gate) = self.flush_mrs_locked(true)?;
            *self.schema.write() = Arc::new(new);
            for rs in self.components().disk.iter() {
                rs.skip_cache.clear();
            }
            self.note_applied(index, HybridTime::MIN);
            self.persist()?;
            drop(gate);
        } else {
            let _g = self.gate.read();
            self.note_applied(index, HybridTime::MIN);
        }
        Ok(())
    }
}
