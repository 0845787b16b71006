//! `ALTER TABLE … ADD SUBSPACE` and `DROP SUBSPACE`: the client's side.
//!
//! Adding a subspace to a table that already has rows (HyperDex §3: a subspace holds a
//! copy of every object) goes through the steps the master's catalog describes, while
//! writes to the table go on:
//!
//! 1. sample the table's values of the subspace's attributes, so the new grid's
//!    region boundaries follow the data (its quantiles) rather than defaults;
//! 2. ask the master to add the subspace, *being built*: it creates the region table
//!    and has every tablet's leader chain each change into it from a timestamp on
//!    (`chained_after`);
//! 3. backfill: read the table at or after that timestamp and write every row into its
//!    region ([`Client::repair_subspaces`] on the new subspace alone), at the read's
//!    snapshot as version, so a change chained meanwhile (a newer version) wins;
//! 4. tell the master the subspace is live: searches use it from then on.
//!
//! Running it again after an interruption finishes a subspace still being built.

use std::time::Duration;

use cairn_common::Value;
use cairn_hyperspace::SubspaceSpec;
use cairn_proto::AlterTableRequest;

use crate::client::Client;
use crate::error::{ClientError, Result};
use crate::table::Table;

/// How many rows' values the region boundaries of a subspace added to a table with rows
/// are computed from.
pub const SAMPLE_ROWS: usize = 8192;

/// How long an added subspace may take to be chained into by every tablet.
const CHAINED_WAIT: Duration = Duration::from_secs(120);

/// What [`Client::add_subspace`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AddedSubspace {
    /// The table's rows the backfill read.
    pub rows: u64,
    /// Copies the backfill wrote.
    pub copies_written: u64,
    /// The snapshot the backfill read the table at.
    pub snapshot: u64,
}

impl Client {
    /// Adds subspace `spec` to table `name`, which may hold rows and take writes
    /// meanwhile (see the module docs). `progress` hears each step and, during the
    /// backfill, the copies written so far. A subspace of the same name still being
    /// built (an earlier call was interrupted) is finished instead.
    pub async fn add_subspace(
        &self,
        name: &str,
        mut spec: SubspaceSpec,
        progress: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<AddedSubspace> {
        let table = self.open_table(name).await?;
        let resuming = match table.subspaces.iter().find(|s| s.layout.name == spec.name) {
            Some(s) if s.building => true,
            Some(_) => {
                return Err(ClientError::InvalidArgument(format!(
                    "table '{name}' already has a subspace named '{}'",
                    spec.name
                )));
            }
            None => false,
        };
        if !resuming {
            progress("sampling the table's values");
            spec.sample = self.sample_values(&table, &spec.columns).await?;
            progress("adding the subspace to the catalog");
            self.send_alter(
                name,
                AlterTableRequest {
                    name: name.to_string(),
                    add_subspaces_json: serde_json::to_vec(&[&spec])
                        .map_err(|e| ClientError::Internal(e.to_string()))?
                        .into(),
                    ..Default::default()
                },
            )
            .await?;
        }
        progress("waiting for every tablet to chain changes into it");
        let deadline = tokio::time::Instant::now() + CHAINED_WAIT;
        let (table, chained_after) = loop {
            let t = self.open_table(name).await?;
            let after = t
                .subspaces
                .iter()
                .find(|s| s.layout.name == spec.name)
                .map(|s| s.chained_after)
                .ok_or_else(|| {
                    ClientError::Internal(format!(
                        "subspace '{}' left table '{name}' while it was being added",
                        spec.name
                    ))
                })?;
            if after > 0 {
                break (t, after);
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ClientError::Subspace {
                    message: format!(
                        "subspace '{}' of table '{name}' is in the catalog but not every \
                         tablet chains into it yet (a tablet without a leader?); run the \
                         same ALTER TABLE again to finish it",
                        spec.name
                    ),
                    retryable: true,
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        // The backfill reads at or after the moment every tablet chains into it.
        self.observe_timestamp(chained_after);
        progress("copying the table's rows into its regions");
        let report = self
            .repair_some_subspaces(&table, Some(&spec.name), Duration::from_secs(60), |n| {
                progress(&format!("{n} copies written"))
            })
            .await?;
        progress("making the subspace live");
        self.send_alter(
            name,
            AlterTableRequest {
                name: name.to_string(),
                subspace_live: spec.name.clone(),
                ..Default::default()
            },
        )
        .await?;
        Ok(AddedSubspace {
            rows: report.rows,
            copies_written: report.copies_written,
            snapshot: report.snapshot,
        })
    }

    /// Drops subspace `subspace` of table `name`: searches stop using it at once; its
    /// region table is deleted once no tablet chains into it any more.
    pub async fn drop_subspace(&self, name: &str, subspace: &str) -> Result<()> {
        self.send_alter(
            name,
            AlterTableRequest {
                name: name.to_string(),
                drop_subspaces_json: serde_json::to_vec(&[subspace])
                    .map_err(|e| ClientError::Internal(e.to_string()))?
                    .into(),
                ..Default::default()
            },
        )
        .await?;
        Ok(())
    }

    /// Up to [`SAMPLE_ROWS`] rows of `columns`' values of `table`, spread evenly over
    /// its rows.
    async fn sample_values(&self, table: &Table, columns: &[String]) -> Result<Vec<Vec<Value>>> {
        let mut types = Vec::with_capacity(columns.len());
        for c in columns {
            types.push(
                table
                    .schema
                    .column(table.schema.index_of(c)?)
                    .data_type
                    .clone(),
            );
        }
        let r = self
            .scan(table)
            .projection(columns.to_vec())
            .read_mode(crate::scan::ReadMode::ReadYourWrites)
            .execute()
            .await?;
        let total: usize = r.batches.iter().map(|b| b.num_rows()).sum();
        let step = total.div_ceil(SAMPLE_ROWS).max(1);
        let mut out = Vec::with_capacity(total.min(SAMPLE_ROWS));
        let mut n = 0usize;
        for b in &r.batches {
            for i in 0..b.num_rows() {
                if n.is_multiple_of(step) {
                    let row = (0..columns.len())
                        .map(|c| Value::from_array(b.column(c).as_ref(), i, &types[c]))
                        .collect::<cairn_common::Result<Vec<_>>>()?;
                    out.push(row);
                }
                n += 1;
            }
        }
        Ok(out)
    }
}
