//! `cairn sql`: an interactive SQL shell, or one-shot `-c "…"` / `-f file.sql`.
//!
//! The shell runs its own [`SqlEngine`] against the cluster (no SQL server needed):
//! statements end with `;` and may span lines; history is kept in
//! `~/.cairn_history`; results print as tables with the row count and, with
//! `\timing` (on by default), the time taken. `\q` quits, `\d` lists tables, `\d t`
//! describes one, `\?` shows help.

use std::io::{IsTerminal, Read};
use std::path::PathBuf;
use std::time::Instant;

use arrow::util::pretty::pretty_format_batches;
use cairn_sql::{QueryResult, SqlEngine, SqlSession};
use clap::Args;
use futures::StreamExt;

use super::{MasterArgs, ToolResult};

/// Flags of `cairn sql`.
#[derive(Args, Debug)]
pub struct SqlArgs {
    #[command(flatten)]
    pub cluster: MasterArgs,
    /// Run these statements, print their results and exit.
    #[arg(short = 'c', long = "command", value_name = "SQL")]
    pub command: Option<String>,
    /// Run the statements in this file ('-' for stdin), print their results and exit.
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Do not print how long each statement took.
    #[arg(long)]
    pub no_timing: bool,
}

/// Runs `cairn sql`.
pub async fn run(args: SqlArgs) -> ToolResult<()> {
    let client = args.cluster.connect().await?;
    let engine = SqlEngine::new(client)?;
    let session = engine.session();
    let mut timing = !args.no_timing;
    if let Some(sql) = &args.command {
        return run_batch(&session, sql, timing).await;
    }
    if let Some(f) = &args.file {
        let sql = if f.as_os_str() == "-" {
            let mut s = String::new();
            std::io::stdin().read_to_string(&mut s)?;
            s
        } else {
            std::fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?
        };
        return run_batch(&session, &sql, timing).await;
    }
    if !std::io::stdin().is_terminal() {
        let mut s = String::new();
        std::io::stdin().read_to_string(&mut s)?;
        return run_batch(&session, &s, timing).await;
    }
    interactive(&session, &mut timing).await
}

/// Runs statements and stops at the first error.
async fn run_batch(session: &SqlSession, sql: &str, timing: bool) -> ToolResult<()> {
    run_and_print(session, sql, timing).await
}

async fn interactive(session: &SqlSession, timing: &mut bool) -> ToolResult<()> {
    let mut rl = rustyline::DefaultEditor::new()?;
    let history = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cairn_history"));
    if let Some(h) = &history {
        let _ = rl.load_history(h);
    }
    println!("cairn sql — statements end with ';'. \\? for help, \\q to quit.");
    let mut buffer = String::new();
    loop {
        let prompt = if buffer.is_empty() {
            "cairn> "
        } else {
            "   ..> "
        };
        let line = match rl.readline(prompt) {
            Ok(l) => l,
            Err(rustyline::error::ReadlineError::Interrupted) => {
                buffer.clear();
                continue;
            }
            Err(rustyline::error::ReadlineError::Eof) => break,
            Err(e) => return Err(e.into()),
        };
        let trimmed = line.trim();
        if buffer.is_empty() && trimmed.starts_with('\\') {
            let _ = rl.add_history_entry(trimmed);
            match meta_command(trimmed, timing) {
                Meta::Quit => break,
                Meta::Sql(sql) => report(run_and_print(session, &sql, *timing).await),
                Meta::Done => {}
            }
            continue;
        }
        if trimmed.is_empty() && buffer.is_empty() {
            continue;
        }
        buffer.push_str(&line);
        buffer.push('\n');
        if trimmed.ends_with(';') {
            let sql = std::mem::take(&mut buffer);
            let _ = rl.add_history_entry(sql.trim());
            report(run_and_print(session, &sql, *timing).await);
        }
    }
    if let Some(h) = &history {
        let _ = rl.save_history(h);
    }
    Ok(())
}

fn report(r: ToolResult<()>) {
    if let Err(e) = r {
        eprintln!("ERROR: {e}");
    }
}

enum Meta {
    Quit,
    Sql(String),
    Done,
}

fn meta_command(cmd: &str, timing: &mut bool) -> Meta {
    let mut parts = cmd.split_whitespace();
    match (parts.next(), parts.next()) {
        (Some("\\q"), _) => Meta::Quit,
        (Some("\\timing"), _) => {
            *timing = !*timing;
            println!("Timing is {}.", if *timing { "on" } else { "off" });
            Meta::Done
        }
        (Some("\\d" | "\\dt"), None) => Meta::Sql(
            "SELECT table_name FROM information_schema.tables \
             WHERE table_schema = 'public' ORDER BY table_name;"
                .into(),
        ),
        (Some("\\d"), Some(t)) => Meta::Sql(format!("DESCRIBE {t};")),
        _ => {
            println!(
                "\\q            quit\n\\d            list tables\n\\d TABLE      describe a table\n\
                 \\timing       toggle timing\nSQL statements end with ';' and may span lines."
            );
            Meta::Done
        }
    }
}

/// Runs statements, printing each result as it completes.
async fn run_and_print(session: &SqlSession, sql: &str, timing: bool) -> ToolResult<()> {
    let started = Instant::now();
    let results = session.execute(sql).await?;
    for r in results {
        match r.without_copy()? {
            QueryResult::Rows { mut stream, .. } => {
                let mut batches = vec![];
                while let Some(b) = stream.next().await {
                    batches.push(b?);
                }
                let rows: usize = batches.iter().map(|b| b.num_rows()).sum();
                if !batches.is_empty() && batches.iter().any(|b| b.num_columns() > 0) {
                    println!("{}", pretty_format_batches(&batches)?);
                }
                println!("({rows} row{})", if rows == 1 { "" } else { "s" });
            }
            QueryResult::Count { tag, rows } => println!("{tag} {rows}"),
            QueryResult::Done { tag } => println!("{tag}"),
            QueryResult::CopyIn(_) | QueryResult::CopyOut { .. } => {}
        }
    }
    if timing {
        println!("Time: {:.3} ms", started.elapsed().as_secs_f64() * 1000.0);
    }
    Ok(())
}
