//! Hyperspace search (HyperDex §2.3, §3): reading a table through its subspaces.
//!
//! A table created with subspaces ([`CreateTableSpec::subspace`](crate::CreateTableSpec))
//! keeps a full copy of every row in each subspace, in the region its attribute values
//! select; the point leader of each row (its key tablet's leader) keeps the copies up to
//! date by chaining every change through them before it answers the writer. A search
//! plans its predicates onto the subspace that needs the fewest regions
//! ([`cairn_hyperspace::plan_search`]) and scans only those region tablets, at one
//! snapshot, with the predicates pushed down. What a search returns:
//!
//! - every row whose write was acknowledged before the search began (its chain, and
//!   every older chain of the row, had been applied: no region then holds an older live
//!   copy, and the newest is in the region its values select);
//! - each row once: while a change is moving a row between regions, the search may meet
//!   it in both, and keeps the newer version;
//! - rows written concurrently with the search at either their old or their new value.
//!
//! Searches whose predicates constrain no subspace attribute scan the table itself.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use arrow::record_batch::RecordBatch;
use cairn_common::types::RowsToColumns;
use cairn_common::{ColumnPredicate, ColumnSchema, Schema, Value};
use cairn_hyperspace::{
    CELL_COLUMN, Cell, Place, REGION_COLUMN, REMOVED_COLUMN, RegionId, RegionRun, SearchPlan,
    SubspaceEntry, VERSION_COLUMN, cell_bounds, plan_search, region_runs, sorted_groups,
};

use crate::client::Client;
use crate::error::{ClientError, Result};
pub use crate::region_tables::region_table;
use crate::scan::ReadMode;
use crate::table::Table;
use crate::write::Operation;

/// How a region row is first written ([`Client::write_region_rows`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionWrite {
    /// Insert: the region is expected to hold no copy of the row (a row new to the
    /// region); one write instead of a failed conditional one and then an insert.
    Insert,
    /// Upsert if the region's copy is older than the row's version.
    IfOlder,
}

/// How many rounds [`Client::write_region_rows`] takes before giving up on rows that
/// keep racing other writers of the same region rows.
const REGION_WRITE_ROUNDS: usize = 8;

/// Region rows a repair writes per round.
const REPAIR_BATCH: usize = 2_000;

/// What [`Client::repair_subspaces`] did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RepairReport {
    /// The table's rows read.
    pub rows: u64,
    /// Region copies written: missing or stale copies in the right region.
    pub copies_written: u64,
    /// Live copies marked removed: in a region their values do not select, or of rows
    /// the table no longer holds.
    pub copies_removed: u64,
    /// The snapshot the repair read at; its writes carry it as their version.
    pub snapshot: u64,
}

/// At most this many key-range scans read one search's regions (nearby runs of
/// regions merge beyond it).
const MAX_REGION_SCANS: usize = 32;

/// How many of a search's region scans run at once.
const CONCURRENT_REGION_SCANS: usize = 8;

/// How a search was answered (for `EXPLAIN` and the CLI).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPlanInfo {
    /// The subspace asked.
    pub subspace: String,
    /// Its attributes.
    pub columns: Vec<String>,
    /// How many of its regions were asked.
    pub regions: usize,
    /// How many regions it has.
    pub total_regions: u32,
}

impl SearchPlanInfo {
    fn new(entry: &SubspaceEntry, regions: usize, total_regions: u32) -> SearchPlanInfo {
        SearchPlanInfo {
            subspace: entry.layout.name.clone(),
            columns: entry
                .layout
                .columns()
                .iter()
                .map(|c| c.to_string())
                .collect(),
            regions,
            total_regions,
        }
    }
}

impl std::fmt::Display for SearchPlanInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "subspace=({}) regions={}/{}",
            self.columns.join(","),
            self.regions,
            self.total_regions
        )
    }
}

/// The rows a search found, in the table's schema, and how it found them.
#[derive(Clone, Debug)]
pub struct SearchResult {
    /// The rows (every column of the table), in no particular order.
    pub batch: RecordBatch,
    /// The subspace used; `None`: the table itself was scanned.
    pub plan: Option<SearchPlanInfo>,
    /// The snapshot (HybridTime) every region was read at (0: nothing was read).
    pub snapshot_timestamp: u64,
}

/// Every column of `schema` by name, in its order: a region table's scan names them,
/// because a region table that gained a column holds it elsewhere than
/// [`cairn_hyperspace::region_table_schema`] puts it.
fn column_names(schema: &Schema) -> Vec<String> {
    schema.columns().iter().map(|c| c.name.clone()).collect()
}

/// The snapshot a read mode names (0: none yet).
fn snapshot_of(mode: ReadMode) -> u64 {
    match mode {
        ReadMode::Snapshot(ts) => ts,
        ReadMode::Latest | ReadMode::ReadYourWrites => 0,
    }
}

/// Checks `preds` against `table` and plans them onto its searchable subspaces: the
/// subspace that needs the fewest regions with its plan, or `None` when no subspace
/// attribute is constrained (the table itself is read).
fn plan_subspace<'t>(
    table: &'t Table,
    preds: &[ColumnPredicate],
) -> Result<Option<(&'t SubspaceEntry, SearchPlan)>> {
    for p in preds {
        p.validate(&table.schema)?;
    }
    let searchable = table.searchable_subspaces();
    let layouts: Vec<_> = searchable.iter().map(|s| s.layout.clone()).collect();
    Ok(plan_search(&layouts, preds)
        .map_err(hs_error)?
        .map(|plan| (searchable[plan.subspace], plan)))
}

/// The predicate `lo <= __cell <= hi`.
fn cell_range(lo: Cell, hi: Cell) -> ColumnPredicate {
    if lo == hi {
        return ColumnPredicate::eq(CELL_COLUMN, Value::Int64(lo));
    }
    ColumnPredicate {
        column: CELL_COLUMN.to_string(),
        op: cairn_common::PredicateOp::Range {
            lower: Some((Value::Int64(lo), true)),
            upper: Some((Value::Int64(hi), true)),
        },
    }
}

pub(crate) fn hs_error(e: cairn_hyperspace::HyperspaceError) -> ClientError {
    ClientError::InvalidArgument(e.to_string())
}

/// What a search collects from the region tables it scans: each scanned batch, read
/// with [`RegionRows::projection`], is added in turn.
trait RegionRows {
    /// The region-table columns to read.
    fn projection(&self) -> Vec<String>;
    /// Adds the rows of a batch read with [`RegionRows::projection`].
    fn add(&mut self, batch: &RecordBatch) -> Result<()>;
}

/// Rows found in a subspace, one per key: the newest version seen.
struct Found {
    schema: Arc<Schema>,
    rows: HashMap<Vec<u8>, (i64, Vec<Value>)>,
}

impl Found {
    /// Collects whole rows.
    fn new(schema: Arc<Schema>) -> Found {
        Found {
            schema,
            rows: HashMap::new(),
        }
    }

    /// How many rows found have a value (not NULL) in column `ci`.
    fn with_value(&self, ci: usize) -> usize {
        self.rows.values().filter(|(_, r)| !r[ci].is_null()).count()
    }

    fn into_rows(self) -> Vec<Vec<Value>> {
        self.rows.into_values().map(|(_, r)| r).collect()
    }
}

impl RegionRows for Found {
    /// The region-table columns to read: the table's columns, then the version.
    fn projection(&self) -> Vec<String> {
        self.schema
            .columns()
            .iter()
            .map(|c| c.name.clone())
            .chain(std::iter::once(VERSION_COLUMN.to_string()))
            .collect()
    }

    /// Adds the rows of a region-table batch read with [`Found::projection`]: a row
    /// replaces the one held for its key only if its version is newer.
    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = self.schema.num_columns();
        for r in 0..batch.num_rows() {
            let row = row_at(batch, r, self.schema.columns())?;
            let version = match Value::from_array(
                batch.column(n).as_ref(),
                r,
                &cairn_common::DataType::Int64,
            )? {
                Value::Int64(v) => v,
                other => {
                    return Err(ClientError::Decode {
                        what: "region row version",
                        detail: format!("expected a BIGINT, got {other:?}"),
                    });
                }
            };
            let key = cairn_common::key::encode_row_key(&self.schema, &row)?;
            match self.rows.get(&key) {
                Some((v, _)) if *v >= version => {}
                _ => {
                    self.rows.insert(key, (version, row));
                }
            }
        }
        Ok(())
    }
}

/// The distinct keys found in a subspace: what a count needs. A row met in two regions
/// (while a change moves it) is one key, whatever its versions, so only the key columns
/// are read, and they are compared in Arrow's row format, a batch at a time, rather
/// than decoded value by value.
struct DistinctKeys {
    /// The table's key column names.
    columns: Vec<String>,
    /// Encodes the key columns of a batch; made from the first batch's fields.
    converter: Option<arrow::row::RowConverter>,
    keys: HashSet<Box<[u8]>>,
}

impl DistinctKeys {
    fn new(schema: &Schema) -> DistinctKeys {
        DistinctKeys {
            columns: schema
                .key_indexes()
                .iter()
                .map(|&i| schema.column(i).name.clone())
                .collect(),
            converter: None,
            keys: HashSet::new(),
        }
    }

    /// How many distinct keys were found.
    fn len(&self) -> usize {
        self.keys.len()
    }
}

impl RegionRows for DistinctKeys {
    fn projection(&self) -> Vec<String> {
        self.columns.clone()
    }

    fn add(&mut self, batch: &RecordBatch) -> Result<()> {
        let n = self.columns.len();
        if batch.num_columns() < n {
            return Err(ClientError::Decode {
                what: "region rows",
                detail: format!(
                    "expected the {n} key columns, got {} columns",
                    batch.num_columns()
                ),
            });
        }
        if batch.num_rows() == 0 {
            return Ok(());
        }
        let converter = match &mut self.converter {
            Some(c) => c,
            None => {
                let fields = batch.schema().fields()[..n]
                    .iter()
                    .map(|f| arrow::row::SortField::new(f.data_type().clone()))
                    .collect();
                self.converter
                    .insert(arrow::row::RowConverter::new(fields)?)
            }
        };
        let rows = converter.convert_columns(&batch.columns()[..n])?;
        self.keys.reserve(rows.num_rows());
        for row in rows.iter() {
            if !self.keys.contains(row.as_ref()) {
                self.keys.insert(row.as_ref().into());
            }
        }
        Ok(())
    }
}

/// Row `r` of `batch`, whose first columns are `columns` (in order).
fn row_at(batch: &RecordBatch, r: usize, columns: &[ColumnSchema]) -> Result<Vec<Value>> {
    columns
        .iter()
        .enumerate()
        .map(|(i, c)| {
            Ok(Value::from_array(
                batch.column(i).as_ref(),
                r,
                &c.data_type,
            )?)
        })
        .collect()
}

/// Builds a batch of `schema`'s columns from rows.
fn to_batch(schema: &Schema, rows: &[Vec<Value>]) -> Result<RecordBatch> {
    let types: Vec<_> = schema
        .columns()
        .iter()
        .map(|c| c.data_type.clone())
        .collect();
    let mut b = RowsToColumns::new(&types, rows.len());
    for r in rows {
        b.append_row(r)?;
    }
    Ok(RecordBatch::try_new(schema.to_arrow(), b.finish()?)?)
}

/// Every row of a scan of `schema`'s columns (first `schema.num_columns()` columns of
/// each batch), keyed by its encoded primary key.
fn rows_by_key(schema: &Schema, batches: &[RecordBatch]) -> Result<HashMap<Vec<u8>, Vec<Value>>> {
    let mut out = HashMap::new();
    for b in batches {
        for r in 0..b.num_rows() {
            let row = row_at(b, r, schema.columns())?;
            out.insert(cairn_common::key::encode_row_key(schema, &row)?, row);
        }
    }
    Ok(out)
}

impl Client {
    /// Checks that every subspace of `table` holds exactly the table's rows: each live
    /// row once, with the table's values, in the region its values select, and no
    /// other (`cairn cluster ksck --subspaces`). The table is read first, then each
    /// subspace at a snapshot at or after it, so a check while writes are being chained
    /// may report their rows; with writes stopped, any problem is real. Returns the
    /// number of rows checked and the problems found (at most `max_problems`).
    pub async fn check_subspaces(
        &self,
        table: &Table,
        max_problems: usize,
    ) -> Result<(u64, Vec<String>)> {
        let base_scan = self
            .scan(table)
            .read_mode(ReadMode::ReadYourWrites)
            .execute()
            .await?;
        let base = rows_by_key(&table.schema, &base_scan.batches)?;
        let mut problems = Vec::new();
        let mut note = |p: String| {
            if problems.len() < max_problems {
                problems.push(p);
            }
        };
        // A subspace still being built is incomplete until its backfill is done.
        for entry in table.searchable_subspaces() {
            let name = &entry.layout.name;
            let region = region_table(&table.schema, table.replicas, entry)?;
            let scan = self
                .scan(&region)
                .projection(column_names(&region.schema))
                .read_mode(ReadMode::ReadYourWrites)
                .predicate(ColumnPredicate::eq(REMOVED_COLUMN, Value::Bool(false)))
                .execute()
                .await?;
            let mut seen: HashMap<Vec<u8>, ()> = HashMap::new();
            for b in &scan.batches {
                for r in 0..b.num_rows() {
                    let row = row_at(b, r, region.schema.columns())?;
                    let Some(split) = cairn_hyperspace::split_region_row(&row) else {
                        note(format!("subspace {name}: a row of the wrong shape"));
                        continue;
                    };
                    let (place, values) = (split.place, split.values);
                    let key = cairn_common::key::encode_row_key(&table.schema, values)?;
                    let shown = |v: &[Value]| {
                        table
                            .schema
                            .key_indexes()
                            .iter()
                            .map(|&i| v[i].to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    };
                    if seen.insert(key.clone(), ()).is_some() {
                        note(format!(
                            "subspace {name}: key ({}) is held twice",
                            shown(values)
                        ));
                    }
                    match base.get(&key) {
                        None => note(format!(
                            "subspace {name}: key ({}) is not in the table",
                            shown(values)
                        )),
                        Some(b) if b.as_slice() != values => note(format!(
                            "subspace {name}: key ({}) holds other values than the table",
                            shown(values)
                        )),
                        Some(_) => {}
                    }
                    match entry.layout.place_of_row(&table.schema, values) {
                        Ok(want) if want == place => {}
                        _ => note(format!(
                            "subspace {name}: key ({}) is in region {} cell {}, not where its values place it",
                            shown(values),
                            place.0,
                            place.1
                        )),
                    }
                }
            }
            let missing = base.keys().filter(|k| !seen.contains_key(*k)).count();
            if missing > 0 {
                note(format!(
                    "subspace {name}: {missing} of the table's {} rows are missing",
                    base.len()
                ));
            }
        }
        Ok((base.len() as u64, problems))
    }

    /// Writes region rows of a region table (each carrying its version in
    /// [`VERSION_COLUMN`]) so that each ends up applied once: a row is written only if
    /// the region's copy is older or absent, and a copy at the same or a newer version
    /// means it was applied before (a duplicate, HyperDex §4.1). Each row is first
    /// written as its [`RegionWrite`] says; an insert that finds a copy becomes a
    /// conditional upsert, and a conditional upsert that finds no older copy reads the
    /// copy to tell a duplicate (done) from an absent row (inserted).
    ///
    /// Errors: [`ClientError::Subspace`], final when a region refuses a row for another
    /// reason, retryable when rows keep racing other writers of the same region rows.
    pub async fn write_region_rows(
        &self,
        table: &Table,
        rows: Vec<(Vec<Value>, RegionWrite)>,
        timeout: Duration,
    ) -> Result<()> {
        use crate::session::FlushMode;
        use cairn_proto::RowErrorKind;
        let schema = table.schema.clone();
        let vi = schema.index_of(VERSION_COLUMN)?;
        let version_of = |row: &[Value]| match row.get(vi) {
            Some(Value::Int64(v)) => *v,
            _ => i64::MAX,
        };
        let mut pending = rows;
        for _ in 0..REGION_WRITE_ROUNDS {
            let mut session = self.new_session(table);
            session.set_flush_mode(FlushMode::Manual);
            session.set_timeout(timeout);
            for (row, how) in &pending {
                let op = match how {
                    RegionWrite::Insert => Operation::insert(row.clone()),
                    RegionWrite::IfOlder => {
                        Operation::upsert(row.clone()).if_matches(vec![ColumnPredicate::lt(
                            VERSION_COLUMN,
                            Value::Int64(version_of(row)),
                        )])
                    }
                };
                session.apply(op).await?;
            }
            let mut next = Vec::new();
            for e in session.flush().await? {
                let row: Vec<Value> =
                    e.op.values
                        .iter()
                        .map(|v| v.clone().unwrap_or(Value::Null))
                        .collect();
                match e.kind {
                    // A copy is there after all: overwrite it if it is older.
                    RowErrorKind::AlreadyPresent => next.push((row, RegionWrite::IfOlder)),
                    // No older copy: none at all, or one at this version or newer.
                    RowErrorKind::ConditionFailed => {
                        let key: Vec<Value> = schema
                            .key_indexes()
                            .iter()
                            .map(|&i| row[i].clone())
                            .collect();
                        let current = self
                            .get(table, &key, &[VERSION_COLUMN.to_string()], ReadMode::Latest)
                            .await?;
                        match current.as_deref() {
                            None => next.push((row, RegionWrite::Insert)),
                            Some([Value::Int64(v)]) if *v >= version_of(&row) => {}
                            // An older copy arrived in between (a retransmission).
                            Some(_) => next.push((row, RegionWrite::IfOlder)),
                        }
                    }
                    _ => {
                        return Err(ClientError::Subspace {
                            message: format!(
                                "a region of {} refused a row: {}",
                                table.name, e.message
                            ),
                            retryable: false,
                        });
                    }
                }
            }
            if next.is_empty() {
                return Ok(());
            }
            pending = next;
        }
        Err(ClientError::Subspace {
            message: format!(
                "the regions of table {} kept changing under the writes; retry",
                table.name
            ),
            retryable: true,
        })
    }

    /// Makes every subspace of `table` hold exactly the table's rows at one snapshot
    /// (`cairn cluster ksck --subspaces --repair`): the repair for a chain that never
    /// finished (its point leader died and its writer gave up). It reads the table at a
    /// snapshot `S`, then each region table at `S` (tombstones included), and writes,
    /// with version `S` and only over older copies ([`Client::write_region_rows`]):
    ///
    /// - each row whose region (the one its values select) lacks a live copy with the
    ///   table's values: the row, in that region;
    /// - each live copy in another region, or of a row the table does not hold at `S`:
    ///   a tombstone.
    ///
    /// Writes go on meanwhile: a change after `S` is chained at a version above `S`,
    /// so the repair never overwrites it, and a change at or before `S` is what the
    /// repair writes anyway. `progress` is called with the rows written so far.
    pub async fn repair_subspaces(
        &self,
        table: &Table,
        timeout: Duration,
        progress: impl FnMut(u64),
    ) -> Result<RepairReport> {
        self.repair_some_subspaces(table, None, timeout, progress)
            .await
    }

    /// [`Client::repair_subspaces`] on the subspace named `only`, or on all of them.
    pub(crate) async fn repair_some_subspaces(
        &self,
        table: &Table,
        only: Option<&str>,
        timeout: Duration,
        mut progress: impl FnMut(u64),
    ) -> Result<RepairReport> {
        let base_scan = self
            .scan(table)
            .read_mode(ReadMode::ReadYourWrites)
            .execute()
            .await?;
        let snapshot = base_scan.snapshot_timestamp;
        if snapshot == 0 {
            return Err(ClientError::Internal(
                "the table's scan named no snapshot to repair at".into(),
            ));
        }
        let base = rows_by_key(&table.schema, &base_scan.batches)?;
        let version = i64::try_from(snapshot)
            .map_err(|_| ClientError::Internal(format!("snapshot {snapshot} is out of range")))?;
        let mut report = RepairReport {
            rows: base.len() as u64,
            snapshot,
            ..RepairReport::default()
        };
        for entry in table
            .subspaces
            .iter()
            .filter(|e| only.is_none_or(|n| e.layout.name == n))
        {
            let region = region_table(&table.schema, table.replicas, entry)?;
            let scan = self
                .scan(&region)
                .projection(column_names(&region.schema))
                .read_mode(ReadMode::Snapshot(snapshot))
                .execute()
                .await?;
            // Per key: the place (region and cell) holding a live copy with the table's
            // values, if any.
            let mut good: HashMap<Vec<u8>, Place> = HashMap::new();
            let mut held: HashSet<(Vec<u8>, Place)> = HashSet::new();
            let mut writes: Vec<(Vec<Value>, RegionWrite)> = Vec::new();
            for b in &scan.batches {
                for r in 0..b.num_rows() {
                    let row = row_at(b, r, region.schema.columns())?;
                    let Some(split) = cairn_hyperspace::split_region_row(&row) else {
                        return Err(ClientError::Subspace {
                            message: format!(
                                "subspace {} holds a row of the wrong shape",
                                entry.layout.name
                            ),
                            retryable: false,
                        });
                    };
                    let (place, values) = (split.place, split.values);
                    let key = cairn_common::key::encode_row_key(&table.schema, values)?;
                    held.insert((key.clone(), place));
                    if split.removed {
                        continue;
                    }
                    let wanted = base
                        .get(&key)
                        .map(|b| entry.layout.place_of_row(&table.schema, b))
                        .transpose()
                        .map_err(hs_error)?;
                    if wanted == Some(place)
                        && base.get(&key).is_some_and(|b| b.as_slice() == values)
                    {
                        good.insert(key, place);
                    } else if wanted != Some(place) {
                        writes.push((
                            cairn_hyperspace::region_row(values, place, version as u64, true),
                            RegionWrite::IfOlder,
                        ));
                        report.copies_removed += 1;
                    }
                }
            }
            for (key, row) in &base {
                if good.contains_key(key) {
                    continue;
                }
                let place = entry
                    .layout
                    .place_of_row(&table.schema, row)
                    .map_err(hs_error)?;
                let how = if held.contains(&(key.clone(), place)) {
                    RegionWrite::IfOlder
                } else {
                    RegionWrite::Insert
                };
                writes.push((
                    cairn_hyperspace::region_row(row, place, version as u64, false),
                    how,
                ));
                report.copies_written += 1;
            }
            let mut done = 0u64;
            for chunk in writes.chunks(REPAIR_BATCH) {
                self.write_region_rows(&region, chunk.to_vec(), timeout)
                    .await?;
                done += chunk.len() as u64;
                progress(done);
            }
        }
        Ok(report)
    }

    /// Scans `regions` of the subspace `entry` of `table` for rows matching `preds`,
    /// adding them to `found`, at `mode`; a mode that lets the server pick the snapshot
    /// becomes that snapshot, so that every later scan of the search reads the same.
    /// Each run of regions ([`region_runs`]) is one key-range scan; the first fixes the
    /// snapshot, the rest run concurrently at it. A run of one region is narrowed to the
    /// cells the predicates allow ([`cell_bounds`]), so it reads only matching rows'
    /// key range rather than the whole region.
    async fn scan_regions(
        &self,
        table: &Table,
        entry: &SubspaceEntry,
        regions: &[RegionId],
        preds: &[ColumnPredicate],
        found: &mut impl RegionRows,
        mode: &mut ReadMode,
    ) -> Result<()> {
        use futures::StreamExt as _;
        if regions.is_empty() {
            return Ok(());
        }
        let region = self.region_table_of(&table.schema, table.replicas, entry)?;
        let projection = found.projection();
        let cells = cell_bounds(&entry.layout, preds).map_err(hs_error)?;
        let scan_of = |run: RegionRun, mode: ReadMode| {
            let one_region = run.first == run.last;
            let region_pred = if one_region {
                ColumnPredicate::eq(REGION_COLUMN, Value::Int32(run.first as i32))
            } else if run.dense {
                ColumnPredicate::range(
                    REGION_COLUMN,
                    Value::Int32(run.first as i32),
                    Value::Int32(run.last as i32 + 1),
                )
            } else {
                ColumnPredicate::in_list(
                    REGION_COLUMN,
                    regions
                        .iter()
                        .filter(|&&r| run.first <= r && r <= run.last)
                        .map(|&r| Value::Int32(r as i32))
                        .collect(),
                )
            };
            let mut scan = self
                .scan(&region)
                .projection(projection.clone())
                .read_mode(mode)
                .predicate(region_pred)
                .predicate(ColumnPredicate::eq(REMOVED_COLUMN, Value::Bool(false)));
            if let (Some((lo, hi)), true) = (cells, one_region) {
                scan = scan.predicate(cell_range(lo, hi));
            }
            for p in preds {
                scan = scan.predicate(p.clone());
            }
            scan.execute()
        };
        let runs = region_runs(regions, MAX_REGION_SCANS);
        let first = scan_of(runs[0], *mode).await?;
        if first.snapshot_timestamp != 0 {
            *mode = ReadMode::Snapshot(first.snapshot_timestamp);
        }
        for b in &first.batches {
            found.add(b)?;
        }
        let at = *mode;
        // Built up front: a lazily mapped iterator makes the future not provably `Send`.
        let scans: Vec<_> = runs[1..].iter().map(|&run| scan_of(run, at)).collect();
        let mut rest = futures::stream::iter(scans).buffer_unordered(CONCURRENT_REGION_SCANS);
        while let Some(result) = rest.next().await {
            for b in &result?.batches {
                found.add(b)?;
            }
        }
        Ok(())
    }

    /// HyperDex's `search`: the rows of `table` matching every predicate of `preds`,
    /// read from the subspace that needs the fewest regions (the table itself when no
    /// subspace attribute is constrained). See the module docs for what it returns.
    pub async fn search(&self, table: &Table, preds: &[ColumnPredicate]) -> Result<SearchResult> {
        self.search_at(table, preds, ReadMode::ReadYourWrites).await
    }

    /// [`Client::search`] at a chosen snapshot (`ReadMode::Snapshot`), or one the
    /// servers pick ([`SearchResult::snapshot_timestamp`] says which).
    pub async fn search_at(
        &self,
        table: &Table,
        preds: &[ColumnPredicate],
        mut mode: ReadMode,
    ) -> Result<SearchResult> {
        let Some((entry, plan)) = plan_subspace(table, preds)? else {
            let mut scan = self.scan(table).read_mode(mode);
            for p in preds {
                scan = scan.predicate(p.clone());
            }
            let result = scan.execute().await?;
            return Ok(SearchResult {
                batch: result.concat()?,
                plan: None,
                snapshot_timestamp: result.snapshot_timestamp,
            });
        };
        let mut found = Found::new(table.schema.clone());
        self.scan_regions(table, entry, &plan.regions, preds, &mut found, &mut mode)
            .await?;
        let info = SearchPlanInfo::new(entry, plan.regions.len(), plan.total_regions);
        Ok(SearchResult {
            batch: to_batch(&table.schema, &found.into_rows())?,
            plan: Some(info),
            snapshot_timestamp: snapshot_of(mode),
        })
    }

    /// HyperDex's `count`: how many rows of `table` match `preds` (a search that reads
    /// only the rows' keys, and counts the distinct ones).
    pub async fn count(&self, table: &Table, preds: &[ColumnPredicate]) -> Result<u64> {
        Ok(self
            .count_at(table, preds, ReadMode::ReadYourWrites)
            .await?
            .0)
    }

    /// [`Client::count`] at a chosen snapshot, or one the servers pick. Returns the
    /// count, the subspace read (`None`: the table itself) and the snapshot.
    pub async fn count_at(
        &self,
        table: &Table,
        preds: &[ColumnPredicate],
        mut mode: ReadMode,
    ) -> Result<(u64, Option<SearchPlanInfo>, u64)> {
        let Some((entry, plan)) = plan_subspace(table, preds)? else {
            let key = table
                .schema
                .column(table.schema.key_indexes()[0])
                .name
                .clone();
            let mut scan = self.scan(table).read_mode(mode).projection(vec![key]);
            for p in preds {
                scan = scan.predicate(p.clone());
            }
            let result = scan.execute().await?;
            return Ok((result.num_rows() as u64, None, result.snapshot_timestamp));
        };
        let mut keys = DistinctKeys::new(&table.schema);
        self.scan_regions(table, entry, &plan.regions, preds, &mut keys, &mut mode)
            .await?;
        let info = SearchPlanInfo::new(entry, plan.regions.len(), plan.total_regions);
        Ok((keys.len() as u64, Some(info), snapshot_of(mode)))
    }

    /// HyperDex's `sorted_search`: the first `limit` rows matching `preds` ordered by
    /// `column` (ascending or descending; NULLs last). When a subspace has `column` as an
    /// ordered attribute, its regions are read one interval of `column` at a time, in
    /// order, and the search stops once it holds `limit` rows: the intervals not yet
    /// read hold only values further along. Otherwise it searches and sorts.
    pub async fn sorted_search(
        &self,
        table: &Table,
        preds: &[ColumnPredicate],
        column: &str,
        limit: usize,
        ascending: bool,
    ) -> Result<SearchResult> {
        self.sorted_search_at(
            table,
            preds,
            column,
            limit,
            ascending,
            ReadMode::ReadYourWrites,
        )
        .await
    }

    /// [`Client::sorted_search`] at a chosen snapshot, or one the servers pick.
    pub async fn sorted_search_at(
        &self,
        table: &Table,
        preds: &[ColumnPredicate],
        column: &str,
        limit: usize,
        ascending: bool,
        mut mode: ReadMode,
    ) -> Result<SearchResult> {
        let ci = table.schema.index_of(column)?;
        let mut chosen = None;
        let searchable = table.searchable_subspaces();
        for (i, entry) in searchable.iter().enumerate() {
            if let Some(groups) =
                sorted_groups(&entry.layout, preds, column, ascending).map_err(hs_error)?
            {
                let regions: usize = groups.iter().map(Vec::len).sum();
                if chosen.as_ref().is_none_or(|(_, _, n)| regions < *n) {
                    chosen = Some((i, groups, regions));
                }
            }
        }
        let (mut rows, plan) = match chosen {
            None => {
                let r = self.search_at(table, preds, mode).await?;
                mode = ReadMode::Snapshot(r.snapshot_timestamp);
                let rows = (0..r.batch.num_rows())
                    .map(|i| row_at(&r.batch, i, table.schema.columns()))
                    .collect::<Result<Vec<_>>>()?;
                (rows, r.plan)
            }
            Some((i, groups, _)) => {
                let entry = searchable[i];
                let mut found = Found::new(table.schema.clone());
                let mut asked = 0;
                for g in &groups {
                    self.scan_regions(table, entry, g, preds, &mut found, &mut mode)
                        .await?;
                    asked += g.len();
                    // NULLs sort last, so only rows with a value count towards the
                    // limit (interval 0 holds the NULLs).
                    if found.with_value(ci) >= limit {
                        break;
                    }
                }
                let info = SearchPlanInfo::new(entry, asked, entry.layout.region_count());
                (found.into_rows(), Some(info))
            }
        };
        rows.sort_by(|a, b| {
            let (x, y) = (&a[ci], &b[ci]);
            match (x.is_null(), y.is_null()) {
                (true, true) => std::cmp::Ordering::Equal,
                (true, false) => std::cmp::Ordering::Greater,
                (false, true) => std::cmp::Ordering::Less,
                _ => {
                    let o = x.partial_cmp_same(y).unwrap_or(std::cmp::Ordering::Equal);
                    if ascending { o } else { o.reverse() }
                }
            }
        });
        rows.truncate(limit);
        Ok(SearchResult {
            batch: to_batch(&table.schema, &rows)?,
            plan,
            snapshot_timestamp: snapshot_of(mode),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{ArrayRef, Int64Array, StringArray};
    use cairn_common::{ColumnSpec, DataType};

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("k", DataType::Int64),
                ColumnSpec::new("s", DataType::String),
                ColumnSpec::new("a", DataType::Int64).nullable(),
            ],
            &["k", "s"],
        )
        .unwrap()
    }

    /// A region-table batch of key columns and versions: `(k, s, version)` rows.
    fn batch(rows: &[(i64, &str, i64)]) -> RecordBatch {
        let k: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.0)));
        let s: ArrayRef = Arc::new(StringArray::from_iter_values(rows.iter().map(|r| r.1)));
        let v: ArrayRef = Arc::new(Int64Array::from_iter_values(rows.iter().map(|r| r.2)));
        RecordBatch::try_from_iter([("k", k), ("s", s), (VERSION_COLUMN, v)]).unwrap()
    }

    #[test]
    fn a_count_counts_each_key_once_across_regions() {
        let mut keys = DistinctKeys::new(&schema());
        assert_eq!(keys.projection(), vec!["k".to_string(), "s".to_string()]);
        // Two regions' scans: (1, "x") is met in both, as while a change moves it;
        // (1, "y") and (2, "x") share one key column each with it but are other rows.
        keys.add(&batch(&[(1, "x", 5), (1, "y", 5)])).unwrap();
        keys.add(&batch(&[])).unwrap();
        keys.add(&batch(&[(1, "x", 7), (2, "x", 7), (2, "x", 8)]))
            .unwrap();
        assert_eq!(keys.len(), 3);
    }

    #[test]
    fn a_count_rejects_a_batch_without_the_key_columns() {
        let mut keys = DistinctKeys::new(&schema());
        let k: ArrayRef = Arc::new(Int64Array::from(vec![1]));
        let b = RecordBatch::try_from_iter([("k", k)]).unwrap();
        assert!(matches!(keys.add(&b), Err(ClientError::Decode { .. })));
    }

    #[test]
    fn a_search_keeps_the_newest_version_of_a_row_met_twice() {
        let schema = Arc::new(schema());
        let mut found = Found::new(schema);
        assert_eq!(
            found.projection(),
            vec!["k", "s", "a", VERSION_COLUMN]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        );
        let row = |k: i64, a: i64, version: i64| {
            let cols: Vec<(&str, ArrayRef)> = vec![
                ("k", Arc::new(Int64Array::from(vec![k]))),
                ("s", Arc::new(StringArray::from(vec!["x"]))),
                ("a", Arc::new(Int64Array::from(vec![a]))),
                (VERSION_COLUMN, Arc::new(Int64Array::from(vec![version]))),
            ];
            RecordBatch::try_from_iter(cols).unwrap()
        };
        found.add(&row(1, 10, 2)).unwrap();
        found.add(&row(1, 20, 3)).unwrap();
        found.add(&row(1, 5, 1)).unwrap();
        found.add(&row(2, 7, 1)).unwrap();
        let mut rows = found.into_rows();
        rows.sort_by_key(|r| match r[0] {
            Value::Int64(k) => k,
            _ => 0,
        });
        assert_eq!(rows.len(), 2);
        assert_eq!(rows[0][2], Value::Int64(20));
        assert_eq!(rows[1][2], Value::Int64(7));
    }
}
