//! The subspace checks of `cairn cluster ksck`: the region tablets of every subspace
//! (hidden tables, so not in the table list) and, with `--subspaces`, that each
//! subspace holds exactly its table's rows (`--repair`: after making them so).

use std::time::Duration;

use cairn_client::{Client, Table, TabletLocationInfo};

use super::ksck::KsckReport;

/// How many times a subspace whose contents differ from its table is read again (a
/// second apart) before the difference is reported: writes still being chained show
/// up as differences for a moment.
const CONTENT_ATTEMPTS: usize = 3;

/// The region table of each subspace of `table`, with its tablets' locations; a table
/// whose locations cannot be read is a problem.
pub async fn region_tables(
    client: &Client,
    table: &Table,
    report: &mut KsckReport,
) -> Vec<(Table, Vec<TabletLocationInfo>)> {
    let mut out = Vec::new();
    for entry in &table.subspaces {
        let region =
            match cairn_client::hyperspace::region_table(&table.schema, table.replicas, entry) {
                Ok(r) => r,
                Err(e) => {
                    report.problems.push(format!(
                        "table '{}': subspace {}: {e}",
                        table.name, entry.layout.name
                    ));
                    continue;
                }
            };
        match client.table_locations(&region, true).await {
            Ok(l) if l.is_empty() => report.problems.push(format!(
                "table '{}': subspace {} has no region tablets",
                table.name, entry.layout.name
            )),
            Ok(l) => out.push((region, l.as_ref().clone())),
            Err(e) => report.problems.push(format!(
                "table '{}': subspace {}: cannot get its region tablets: {e}",
                table.name, entry.layout.name
            )),
        }
    }
    out
}

/// Repairs the subspaces of `table` ([`Client::repair_subspaces`]), with a progress
/// bar of the region rows written; a failure is a problem.
pub async fn repair(client: &Client, table: &Table, report: &mut KsckReport) {
    if table.subspaces.is_empty() {
        return;
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{spinner} {msg}: {pos} region row(s) written")
    {
        bar.set_style(style);
    }
    bar.set_message(format!("repairing the subspaces of '{}'", table.name));
    bar.enable_steady_tick(Duration::from_millis(200));
    let timeout = Duration::from_secs(60);
    match client
        .repair_subspaces(table, timeout, |n| bar.set_position(n))
        .await
    {
        Ok(r) => {
            bar.finish_and_clear();
            println!(
                "Repaired the subspaces of '{}' at snapshot {}: {} row(s) read, {} copy(ies) \
                 written, {} marked removed",
                table.name, r.snapshot, r.rows, r.copies_written, r.copies_removed
            );
        }
        Err(e) => {
            bar.finish_and_clear();
            report.problems.push(format!(
                "table '{}': repairing its subspaces failed: {e}",
                table.name
            ));
        }
    }
}

/// Checks that every subspace of `table` holds exactly its rows; differences that
/// persist over [`CONTENT_ATTEMPTS`] reads are problems.
pub async fn check_contents(client: &Client, table: &Table, report: &mut KsckReport) {
    if table.subspaces.is_empty() {
        return;
    }
    let mut last = Vec::new();
    for attempt in 0..CONTENT_ATTEMPTS {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
        match client.check_subspaces(table, 20).await {
            Ok((rows, problems)) if problems.is_empty() => {
                println!(
                    "Subspaces of '{}': {} subspace(s) agree with its {rows} row(s)",
                    table.name,
                    table.subspaces.len()
                );
                return;
            }
            Ok((_, problems)) => last = problems,
            Err(e) => last = vec![format!("cannot read them: {e}")],
        }
    }
    for p in last {
        report.problems.push(format!("table '{}': {p}", table.name));
    }
}
