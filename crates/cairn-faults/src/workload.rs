//! Client workloads. Each client ("process") runs one operation at a time and records
//! it in the [`History`]; errors whose outcome is unknown (timeouts, lost leaders)
//! are recorded as `info`, never as failures.
//!
//! - **Registers, native client**: keys `n…`: read (a READ_LATEST scan of the key),
//!   write (UPSERT), compare-and-set (UPDATE on condition `v = expected`).
//! - **Registers, SQL**: keys `s…` through Cairn's SQL engine: `SELECT v … WHERE
//!   k = …`, `UPSERT INTO …`, `UPDATE … SET v = new WHERE k = … AND v = expected`
//!   (one row changed: ok; none: fail).
//! - **Counter**: `UPDATE counters SET v = v + 1 WHERE k = 'c'` through SQL.
//! - **Set**: unique inserts through the native client, each element `e` in group
//!   `e % GROUPS`, which a subspace indexes; a searcher searches and counts a group
//!   through the subspace (hyperspace search) while the inserts go on.
//! - **Bank**: [`ACCOUNT_COUNT`] accounts spread over the tablets of one table;
//!   transfer processes move money between two accounts in a SQL transaction
//!   (`BEGIN`, two `UPDATE`s, `COMMIT`), and a reader reads every balance in one
//!   snapshot — by an autocommit `SELECT`, or twice inside one transaction. Snapshot
//!   isolation keeps the total at [`ACCOUNT_COUNT`] × [`OPENING_BALANCE`] in every read.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arrow::array::{Array, Int64Array};
use cairn_client::{Client, ClientError, ClientOptions, FlushMode, Operation, ReadMode, Table};
use cairn_common::{
    ColumnPredicate, ColumnSpec, DataType, HashLevel, PartitionSchema, Schema, Value,
};
use cairn_proto::RowErrorKind;
use cairn_sql::{QueryResult, SqlEngine};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::history::{History, Kind, Pending};
use crate::{FaultsError, Result};

/// The tables the workloads use: (name, key column, value column or none).
pub const REGISTERS: &str = "registers";
/// The counter table.
pub const COUNTERS: &str = "counters";
/// The set table: `e BIGINT` primary key, `g BIGINT` (its group), a subspace on `g`.
pub const ELEMENTS: &str = "elements";
/// The groups of the set's elements.
pub const GROUPS: i64 = 8;
/// The bank's table: `id BIGINT` primary key, `balance BIGINT`.
pub const ACCOUNTS: &str = "accounts";
/// Accounts in the bank.
pub const ACCOUNT_COUNT: i64 = 8;
/// Every account's balance when the run starts.
pub const OPENING_BALANCE: i64 = 100;

/// Client options: short enough that an unknown outcome is recorded as such soon.
pub fn client_options() -> ClientOptions {
    ClientOptions::default()
        .rpc_timeout(Duration::from_secs(3))
        .operation_timeout(Duration::from_secs(8))
}

/// Creates the workload tables (3 replicas), the counter row and the bank's accounts.
pub async fn create_tables(client: &Client) -> Result<()> {
    let setup = |e: ClientError| FaultsError::Setup(format!("creating the tables: {e}"));
    let schema = |columns: Vec<ColumnSpec>, key: &str| {
        Schema::new(columns, &[key]).map_err(|e| FaultsError::Setup(e.to_string()))
    };
    // A table with 3 replicas, hashed into 4 buckets on `hashed_on` if given.
    let create = |name: &'static str, schema: Schema, hashed_on: Option<&str>| {
        let mut spec = cairn_client::CreateTableSpec::new(name, schema).replicas(3);
        if let Some(col) = hashed_on {
            spec = spec.partition(PartitionSchema {
                hash_levels: vec![HashLevel {
                    columns: vec![col.into()],
                    num_buckets: 4,
                    seed: 0,
                }],
                range_columns: vec![],
            });
        }
        client.create_table(spec)
    };
    // Inserts `rows` into `name`, each acknowledged before the next.
    let seed = |name: &'static str, rows: Vec<Vec<Value>>| async move {
        let t = client.open_table(name).await?;
        let mut s = client.new_session(&t);
        s.set_flush_mode(FlushMode::AutoFlushSync);
        for row in rows {
            s.apply(Operation::insert(row)).await?;
        }
        Ok::<_, ClientError>(())
    };
    let kv = schema(
        vec![
            ColumnSpec::new("k", DataType::String),
            ColumnSpec::new("v", DataType::Int64).nullable(),
        ],
        "k",
    )?;
    create(REGISTERS, kv.clone(), Some("k"))
        .await
        .map_err(setup)?;
    create(COUNTERS, kv, None).await.map_err(setup)?;
    let set = schema(
        vec![
            ColumnSpec::new("e", DataType::Int64),
            ColumnSpec::new("g", DataType::Int64),
        ],
        "e",
    )?;
    let set_spec = cairn_client::CreateTableSpec::new(ELEMENTS, set)
        .replicas(3)
        .partition(PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["e".into()],
                num_buckets: 4,
                seed: 0,
            }],
            range_columns: vec![],
        })
        .subspace(
            cairn_client::SubspaceSpec::new(&["g"])
                .regions(16)
                .tablets(2),
        );
    client.create_table(set_spec).await.map_err(setup)?;
    let accounts = schema(
        vec![
            ColumnSpec::new("id", DataType::Int64),
            ColumnSpec::new("balance", DataType::Int64),
        ],
        "id",
    )?;
    create(ACCOUNTS, accounts, Some("id"))
        .await
        .map_err(setup)?;
    let opening = (0..ACCOUNT_COUNT)
        .map(|id| vec![Value::Int64(id), Value::Int64(OPENING_BALANCE)])
        .collect();
    seed(ACCOUNTS, opening).await.map_err(setup)?;
    let counter = vec![Value::String("c".into()), Value::Int64(0)];
    seed(COUNTERS, vec![counter]).await.map_err(setup)?;
    Ok(())
}

/// Whether a write's error leaves its outcome unknown (`info`) rather than certainly
/// not applied (`fail`).
fn indeterminate(e: &ClientError) -> bool {
    !matches!(
        e,
        ClientError::Row(_) | ClientError::InvalidArgument(_) | ClientError::TableNotFound(_)
    )
}

/// Completes `p` with error `e`: `info` when its outcome is unknown
/// ([`indeterminate`]), an error of the history otherwise.
fn settle_error(p: Pending, e: ClientError) -> Kind {
    if indeterminate(&e) {
        p.complete(Kind::Info, None)
    } else {
        p.error(e)
    }
}

/// The register keys a workload draws from: `live` keys at a time, in generations.
/// A generation is retired for a fresh one after `live × ops_per_key` operations, or
/// as soon as [`UNKNOWN_PER_KEY`] × `live` of its operations ended with an unknown
/// outcome — Jepsen's independent keys. An operation of unknown outcome stays open to
/// the end of its key's history, and the linearizability search grows exponentially
/// with how many of them overlap on one key: a fault that makes every call time out
/// must not pile them on a few keys (a 100-cycle run on 6 fixed keys left about 300
/// on each, and the check did not finish).
#[derive(Clone, Debug)]
pub struct KeySpace {
    prefix: &'static str,
    live: usize,
    ops_per_key: usize,
    current: Arc<std::sync::Mutex<Generation>>,
}

/// Unknown outcomes per live key after which a key generation is retired.
pub const UNKNOWN_PER_KEY: usize = 2;

#[derive(Debug, Default)]
struct Generation {
    number: u64,
    ops: usize,
    unknown: usize,
}

impl KeySpace {
    /// Keys `{prefix}{generation}-{i}`, `live` at a time (at least one), each used
    /// for about `ops_per_key` operations (at least one).
    pub fn new(prefix: &'static str, live: usize, ops_per_key: usize) -> KeySpace {
        KeySpace {
            prefix,
            live: live.max(1),
            ops_per_key: ops_per_key.max(1),
            current: Default::default(),
        }
    }

    /// The key for the next operation, and its generation (for [`KeySpace::unknown`]).
    pub fn next(&self, rng: &mut StdRng) -> (String, u64) {
        let mut g = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if g.ops >= self.live * self.ops_per_key || g.unknown >= self.live * UNKNOWN_PER_KEY {
            *g = Generation {
                number: g.number + 1,
                ..Default::default()
            };
        }
        g.ops += 1;
        let key = format!(
            "{}{}-{}",
            self.prefix,
            g.number,
            rng.random_range(0..self.live)
        );
        (key, g.number)
    }

    /// Notes that an operation on a key of `generation` ended with an unknown outcome.
    pub fn unknown(&self, generation: u64) {
        let mut g = self.current.lock().unwrap_or_else(|e| e.into_inner());
        if g.number == generation {
            g.unknown += 1;
        }
    }
}

/// A native-client register process.
pub async fn native_register(
    client: Client,
    table: Table,
    process: usize,
    keys: KeySpace,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let schema = table.schema.clone();
    while !stop.load(Ordering::Acquire) {
        let (key, generation) = keys.next(&mut rng);
        let outcome = match rng.random_range(0..10) {
            0..=3 => {
                let p = history.invoke(process, "read", &key, None, None);
                match read_register(&client, &table, &key).await {
                    Ok(v) => p.complete(Kind::Ok, v),
                    Err(e) => p.error(e),
                }
            }
            4..=6 => {
                let v = rng.random_range(0..5);
                let p = history.invoke(process, "write", &key, Some(v), None);
                let mut s = client.new_session(&table);
                let op = Operation::upsert(vec![Value::String(key.clone()), Value::Int64(v)]);
                match s.apply(op).await {
                    Ok(()) => p.complete(Kind::Ok, None),
                    Err(e) => settle_error(p, e),
                }
            }
            _ => {
                let old = rng.random_range(0..5);
                let new = rng.random_range(0..5);
                let p = history.invoke(process, "cas", &key, Some(new), Some(old));
                let mut s = client.new_session(&table);
                let op = match Operation::update(
                    &schema,
                    &[Value::String(key.clone())],
                    &[("v", Value::Int64(new))],
                ) {
                    Ok(op) => op.if_matches(vec![ColumnPredicate::eq("v", Value::Int64(old))]),
                    Err(e) => {
                        p.error(e);
                        continue;
                    }
                };
                match s.apply(op).await {
                    Ok(()) => p.complete(Kind::Ok, None),
                    Err(ClientError::Row(r))
                        if matches!(
                            r.kind,
                            RowErrorKind::ConditionFailed | RowErrorKind::NotFound
                        ) =>
                    {
                        p.complete(Kind::Fail, None)
                    }
                    Err(e) => settle_error(p, e),
                }
            }
        };
        if outcome == Kind::Info {
            keys.unknown(generation);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// Reads register `key` with a READ_LATEST scan.
pub async fn read_register(
    client: &Client,
    table: &Table,
    key: &str,
) -> Result<Option<i64>, ClientError> {
    let r = client
        .scan(table)
        .projection(["v"])
        .predicate(ColumnPredicate::eq("k", Value::String(key.into())))
        .read_mode(ReadMode::Latest)
        .execute()
        .await?;
    let mut out = None;
    for b in &r.batches {
        if let Some(a) = b.column(0).as_any().downcast_ref::<Int64Array>() {
            for i in 0..a.len() {
                out = (!a.is_null(i)).then(|| a.value(i));
            }
        }
    }
    Ok(out)
}

/// The single BIGINT value of a query's first row, if any.
async fn query_i64(engine: &SqlEngine, sql: &str) -> std::result::Result<Option<i64>, String> {
    let batches = engine
        .session()
        .query(sql)
        .await
        .map_err(|e| e.to_string())?;
    for b in batches {
        if b.num_rows() > 0 {
            let a = b
                .column(0)
                .as_any()
                .downcast_ref::<Int64Array>()
                .ok_or("not a BIGINT column")?;
            return Ok((!a.is_null(0)).then(|| a.value(0)));
        }
    }
    Ok(None)
}

/// Rows a DML statement changed.
async fn dml(engine: &SqlEngine, sql: &str) -> std::result::Result<u64, cairn_sql::SqlError> {
    let mut n = 0;
    for r in engine.session().execute(sql).await? {
        if let QueryResult::Count { rows, .. } = r {
            n += rows;
        }
    }
    Ok(n)
}

/// Whether a SQL error leaves the statement's outcome unknown.
fn sql_indeterminate(e: &cairn_sql::SqlError) -> bool {
    !matches!(e.sqlstate(), "22023" | "42601" | "42P01" | "0A000")
}

/// A SQL register process.
pub async fn sql_register(
    engine: SqlEngine,
    process: usize,
    keys: KeySpace,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Acquire) {
        let (key, generation) = keys.next(&mut rng);
        let outcome = match rng.random_range(0..10) {
            0..=3 => {
                let p = history.invoke(process, "read", &key, None, None);
                match query_i64(
                    &engine,
                    &format!("SELECT v FROM {REGISTERS} WHERE k = '{key}'"),
                )
                .await
                {
                    Ok(v) => p.complete(Kind::Ok, v),
                    Err(e) => p.error(e),
                }
            }
            4..=6 => {
                let v = rng.random_range(0..5);
                let p = history.invoke(process, "write", &key, Some(v), None);
                match dml(
                    &engine,
                    &format!("UPSERT INTO {REGISTERS} VALUES ('{key}', {v})"),
                )
                .await
                {
                    Ok(_) => p.complete(Kind::Ok, None),
                    Err(e) if sql_indeterminate(&e) => p.complete(Kind::Info, None),
                    Err(e) => p.error(e),
                }
            }
            _ => {
                let old = rng.random_range(0..5);
                let new = rng.random_range(0..5);
                let p = history.invoke(process, "cas", &key, Some(new), Some(old));
                let sql =
                    format!("UPDATE {REGISTERS} SET v = {new} WHERE k = '{key}' AND v = {old}");
                complete_one_row(p, dml(&engine, &sql).await)
            }
        };
        if outcome == Kind::Info {
            keys.unknown(generation);
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// Completes `p` from the outcome of a statement meant to change one row: one row
/// changed is `ok`, none is `fail`, an error of unknown outcome is `info`. Returns
/// the kind recorded.
fn complete_one_row(p: Pending, outcome: std::result::Result<u64, cairn_sql::SqlError>) -> Kind {
    match outcome {
        Ok(1) => p.complete(Kind::Ok, None),
        Ok(_) => p.complete(Kind::Fail, None),
        Err(e) if sql_indeterminate(&e) => p.complete(Kind::Info, None),
        Err(e) => p.error(e),
    }
}

/// A counter process: atomic increments through SQL.
pub async fn counter(
    engine: SqlEngine,
    process: usize,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Acquire) {
        let p = history.invoke(process, "add", "c", Some(1), None);
        let sql = format!("UPDATE {COUNTERS} SET v = v + 1 WHERE k = 'c'");
        complete_one_row(p, dml(&engine, &sql).await);
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// A set process: unique inserts `process * 10^9 + i`.
pub async fn set_inserts(
    client: Client,
    table: Table,
    process: usize,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut i = 0i64;
    while !stop.load(Ordering::Acquire) {
        let e = process as i64 * 1_000_000_000 + i;
        i += 1;
        let p = history.invoke(process, "insert", &e.to_string(), Some(e), None);
        let mut s = client.new_session(&table);
        match s
            .apply(Operation::insert(vec![
                Value::Int64(e),
                Value::Int64(e % GROUPS),
            ]))
            .await
        {
            Ok(()) => p.complete(Kind::Ok, None),
            Err(e) => settle_error(p, e),
        };
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// A set searcher: searches a random group of the set through its subspace, then
/// counts one.
pub async fn set_searches(
    client: Client,
    table: Table,
    process: usize,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Acquire) {
        let g = rng.random_range(0..GROUPS);
        let preds = [ColumnPredicate::eq("g", Value::Int64(g))];
        let p = history.invoke(process, "search", &g.to_string(), None, None);
        match client.search(&table, &preds).await {
            Ok(r) => {
                let found = r
                    .batch
                    .column(0)
                    .as_any()
                    .downcast_ref::<Int64Array>()
                    .map(|a| a.values().to_vec());
                match found {
                    Some(f) => p.found(f),
                    None => p.error("a search returned a batch without the element column"),
                };
            }
            Err(e) => {
                settle_error(p, e);
            }
        }
        let g = rng.random_range(0..GROUPS);
        let preds = [ColumnPredicate::eq("g", Value::Int64(g))];
        let p = history.invoke(process, "count", &g.to_string(), None, None);
        match client.count(&table, &preds).await {
            Ok(n) => {
                p.complete(Kind::Ok, Some(n as i64));
            }
            Err(e) => {
                settle_error(p, e);
            }
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(20..80))).await;
    }
}

/// Every element of the set table (latest), retrying while the cluster settles.
pub async fn read_set(client: &Client, table: &Table) -> Result<Vec<i64>> {
    let mut last = String::new();
    for _ in 0..60 {
        match client.scan(table).projection(["e"]).execute().await {
            Ok(r) => {
                let mut out = vec![];
                for b in &r.batches {
                    if let Some(a) = b.column(0).as_any().downcast_ref::<Int64Array>() {
                        out.extend(a.values().iter().copied());
                    }
                }
                return Ok(out);
            }
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(FaultsError::Setup(format!(
        "the final read of the set kept failing: {last}"
    )))
}

/// The counter's value (latest), retrying while the cluster settles.
pub async fn read_counter(client: &Client, table: &Table) -> Result<i64> {
    let mut last = String::new();
    for _ in 0..60 {
        match read_register(client, table, "c").await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => last = "the counter row is missing".into(),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(FaultsError::Setup(format!(
        "the final read of the counter kept failing: {last}"
    )))
}

/// A bank transfer process: moves 1–5 from one account to another in a SQL
/// transaction. A statement that fails before `COMMIT` rolls the transaction back
/// (`fail`: nothing was committed); a `COMMIT` refused with 40001 (first committer
/// wins) is `fail`; a `COMMIT` whose outcome is unknown is `info`.
pub async fn bank_transfers(
    engine: SqlEngine,
    process: usize,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Acquire) {
        let from = rng.random_range(0..ACCOUNT_COUNT);
        let to = (from + rng.random_range(1..ACCOUNT_COUNT)) % ACCOUNT_COUNT;
        let amount = rng.random_range(1..=5);
        let p = history.invoke(
            process,
            "transfer",
            &format!("{from}->{to}"),
            Some(amount),
            None,
        );
        let session = engine.session();
        let body = async {
            session.execute("BEGIN").await?;
            for (id, delta) in [(from, -amount), (to, amount)] {
                let sql =
                    format!("UPDATE {ACCOUNTS} SET balance = balance + ({delta}) WHERE id = {id}");
                let mut n = 0;
                for r in session.execute(&sql).await? {
                    if let QueryResult::Count { rows, .. } = r {
                        n += rows;
                    }
                }
                if n != 1 {
                    return Err(cairn_sql::SqlError::other(
                        "XX000",
                        format!("the transfer's UPDATE of account {id} changed {n} rows"),
                    ));
                }
            }
            Ok(())
        };
        match body.await {
            Err(e) => {
                let _ = session.execute("ROLLBACK").await;
                p.error(e);
            }
            Ok(()) => match session.execute("COMMIT").await {
                Ok(_) => {
                    p.complete(Kind::Ok, None);
                }
                Err(e) if e.sqlstate() == "40001" || !sql_indeterminate(&e) => {
                    p.error(e);
                }
                Err(_) => {
                    p.complete(Kind::Info, None);
                }
            },
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// Every account's (id, balance) as one SQL statement of `session` reads them.
async fn read_accounts(
    session: &cairn_sql::SqlSession,
) -> std::result::Result<Vec<(i64, i64)>, cairn_sql::SqlError> {
    let batches = session
        .query(&format!("SELECT id, balance FROM {ACCOUNTS} ORDER BY id"))
        .await?;
    let mut rows = Vec::new();
    for b in batches {
        let col = |i: usize| {
            b.column(i)
                .as_any()
                .downcast_ref::<Int64Array>()
                .cloned()
                .ok_or_else(|| cairn_sql::SqlError::other("XX000", "not a BIGINT column"))
        };
        let (ids, balances) = (col(0)?, col(1)?);
        rows.extend((0..b.num_rows()).map(|i| (ids.value(i), balances.value(i))));
    }
    Ok(rows)
}

/// A bank reader process: reads every balance in one snapshot, alternately by an
/// autocommit `SELECT` and twice inside a `REPEATABLE READ` transaction; each read is
/// one `balances` operation carrying the rows it saw.
pub async fn bank_reads(
    engine: SqlEngine,
    process: usize,
    history: History,
    stop: Arc<AtomicBool>,
    seed: u64,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !stop.load(Ordering::Acquire) {
        let session = engine.session();
        let in_txn = rng.random_bool(0.5);
        let begun = !in_txn
            || session
                .execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .await
                .is_ok();
        for _ in 0..if in_txn { 2 } else { 1 } {
            if !begun {
                break;
            }
            let p = history.invoke(process, "balances", "accounts", None, None);
            match read_accounts(&session).await {
                Ok(rows) => {
                    p.read_rows(rows);
                }
                Err(e) => {
                    p.error(e);
                    break;
                }
            }
        }
        if in_txn {
            let _ = session.execute("ROLLBACK").await;
        }
        tokio::time::sleep(Duration::from_millis(rng.random_range(5..40))).await;
    }
}

/// Every account's (id, balance) at the latest snapshot, by a SQL read, retrying
/// while the cluster settles.
pub async fn read_bank(engine: &SqlEngine) -> Result<Vec<(i64, i64)>> {
    let mut last = String::new();
    for _ in 0..60 {
        match read_accounts(&engine.session()).await {
            Ok(rows) => return Ok(rows),
            Err(e) => last = e.to_string(),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Err(FaultsError::Setup(format!(
        "the final read of the bank kept failing: {last}"
    )))
}
