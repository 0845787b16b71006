//! How EXPLAIN and EXPLAIN ANALYZE draw a distributed plan: the library's drawing
//! of stages and tasks ([`display_plan_ascii`]), completed below the relay stages
//! of a bounded fan-out (which the library stops at) and with the server every
//! task runs on in each stage's header.

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::arrow::array::{RecordBatch, StringArray};
use datafusion::common::Result;
use datafusion::common::format::ExplainFormat;
use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
use datafusion::execution::context::SessionState;
use datafusion::logical_expr::Explain;
use datafusion::physical_plan::coalesce_partitions::CoalescePartitionsExec;
use datafusion::physical_plan::stream::RecordBatchStreamAdapter;
use datafusion::physical_plan::{ExecutionPlan, SendableRecordBatchStream, execute_stream};
use datafusion_distributed::{
    DistributedExec, DistributedGetterExt, NetworkBoundaryExt, display_plan_ascii,
};
use futures::StreamExt;

use super::{is_distributed, tasks};

/// EXPLAIN of a query that runs distributed: DataFusion's two rows, the physical
/// plan drawn as stages with their tasks and the server each task runs on, each
/// Cairn scan task with the server it reads from. `None` when the query would not run
/// distributed (or EXPLAIN asked for more than the plans): DataFusion explains it.
pub async fn explain(state: &SessionState, e: &Explain) -> Result<Option<RecordBatch>> {
    if e.verbose
        || !matches!(e.explain_format, ExplainFormat::Indent)
        || state.config().get_distributed_worker_resolver().is_err()
    {
        return Ok(None);
    }
    let physical = state.create_physical_plan(&e.plan).await?;
    if !is_distributed(&physical) {
        return Ok(None);
    }
    let logical = state.optimize(&e.plan)?;
    let kinds = StringArray::from(vec!["logical_plan", "physical_plan"]);
    let plans = StringArray::from(vec![
        logical.display_indent().to_string(),
        with_task_servers(
            &draw(&physical),
            &tasks::task_servers(&physical, &state.task_ctx()),
        ),
    ]);
    Ok(Some(RecordBatch::try_new(
        Arc::new(e.schema.as_arrow().clone()),
        vec![Arc::new(kinds), Arc::new(plans)],
    )?))
}

/// `plan` (distributed) drawn as the library draws it, with the stages below every
/// relay drawn too: the library draws a stage's input stages from the children of
/// its plan's head, so it stops at a stage whose head is itself a network boundary
/// (a relay that only gathers its group, [`super::fanout`]). Each such stage's
/// inputs are drawn on their own and put under its box, one level deeper.
pub(super) fn draw(plan: &Arc<dyn ExecutionPlan>) -> String {
    let mut relays = vec![];
    let _ = plan.apply(|n| {
        if let Some(boundary) = n.as_network_boundary()
            && let Some(head) = boundary.input_stage().local_plan()
            && head.is_network_boundary()
        {
            relays.push((boundary.input_stage().num(), Arc::clone(head)));
        }
        Ok(TreeNodeRecursion::Continue)
    });
    let mut lines: Vec<String> = display_plan_ascii(plan.as_ref(), false)
        .lines()
        .map(str::to_string)
        .collect();
    // Outer relays first, so a relay below a relay has its box drawn by then.
    for (num, head) in relays {
        let header = format!("┌───── Stage {num} ");
        let Some(h) = lines
            .iter()
            .position(|l| l.trim_start().starts_with(&header))
        else {
            continue;
        };
        let indent = lines[h].len() - lines[h].trim_start().len();
        let Some(close) = lines[h + 1..]
            .iter()
            .position(|l| {
                l.len() - l.trim_start().len() == indent && l.trim_start().starts_with('└')
            })
            .map(|i| h + 1 + i)
        else {
            continue;
        };
        // The relay's inputs, drawn under a stand-in head whose child is the relay's
        // boundary; the stand-in's own box is left out.
        let stand_in = DistributedExec::new(Arc::new(CoalescePartitionsExec::new(head)));
        let inputs: Vec<String> = display_plan_ascii(&stand_in, false)
            .lines()
            .skip_while(|l| !l.starts_with('└'))
            .skip(1)
            .map(|l| format!("{}{l}", " ".repeat(indent)))
            .collect();
        lines.splice(close + 1..close + 1, inputs);
    }
    let mut drawn = lines.join("\n");
    drawn.push('\n');
    drawn
}

/// `drawn` (a distributed plan as the library draws it, with or without metrics)
/// with the servers each stage's tasks run on, from `servers` (stage number to
/// addresses in task order), after the task counts of the stage's header line:
/// `┌───── Stage 2 ── tasks=2, partitions=4 ── Servers: t0=10.0.0.1:7051 t1=10.0.0.2:7051`.
pub(super) fn with_task_servers(drawn: &str, servers: &BTreeMap<usize, Vec<String>>) -> String {
    let mut out = String::with_capacity(drawn.len());
    for line in drawn.split_inclusive('\n') {
        let stage = line
            .trim_start()
            .strip_prefix("┌───── Stage ")
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|num| num.parse::<usize>().ok());
        let Some(addrs) = stage.and_then(|n| servers.get(&n)) else {
            out.push_str(line);
            continue;
        };
        // After `partitions=<n>` when the header has it, else at the line's end.
        let at = line
            .find("partitions=")
            .map(|p| {
                let digits = &line[p + "partitions=".len()..];
                p + "partitions=".len() + digits.len()
                    - digits
                        .trim_start_matches(|c: char| c.is_ascii_digit())
                        .len()
            })
            .unwrap_or_else(|| line.trim_end_matches('\n').len());
        out.push_str(&line[..at]);
        out.push_str(" ── Servers:");
        for (t, addr) in addrs.iter().enumerate() {
            out.push_str(&format!(" t{t}={addr}"));
        }
        out.push_str(&line[at..]);
    }
    out
}

/// Runs `physical`, a plan of `state`'s, as [`execute_stream`] does; EXPLAIN
/// ANALYZE of a distributed query (the library's `DistributedAnalyzeExec`) gets
/// the server of every task in its stages' headers, as EXPLAIN has them: the
/// tasks went where [`tasks::route_tasks`] sends them, which depends only on the
/// plan and the workers.
pub fn execute(
    physical: Arc<dyn ExecutionPlan>,
    state: &SessionState,
) -> Result<SendableRecordBatchStream> {
    let task_ctx = state.task_ctx();
    if physical.name() != "DistributedAnalyzeExec" {
        return execute_stream(physical, task_ctx);
    }
    let servers = tasks::task_servers(&physical, &task_ctx);
    let stream = execute_stream(physical, task_ctx)?;
    let schema = stream.schema();
    let annotated = stream.map(move |batch| {
        let batch = batch?;
        let columns = batch
            .columns()
            .iter()
            .map(|c| match c.as_any().downcast_ref::<StringArray>() {
                Some(texts) => Arc::new(
                    texts
                        .iter()
                        .map(|t| t.map(|t| with_task_servers(t, &servers)))
                        .collect::<StringArray>(),
                ) as _,
                None => Arc::clone(c),
            })
            .collect();
        Ok(RecordBatch::try_new(batch.schema(), columns)?)
    });
    Ok(Box::pin(RecordBatchStreamAdapter::new(schema, annotated)))
}
