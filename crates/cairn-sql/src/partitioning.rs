//! Cairn's hash partitioning, declared to DataFusion, and the rule that keeps it apart
//! from DataFusion's own.
//!
//! A table with one hash level and one range is split into tablets by
//! `XXH64(key encoding of the hash columns, seed) % buckets`. When a scan reads every
//! bucket, partition *i* being bucket *i*, [`CairnScanExec`] declares
//! `Partitioning::Hash(hash columns, buckets)`: an aggregation grouped by those columns
//! then needs no repartition, and two tables hashed alike (same column types, bucket
//! count and seed) join partition by partition.
//!
//! DataFusion assumes every `Partitioning::Hash` uses its own hash function: it would
//! join a Cairn-partitioned side with a side it repartitioned itself, pairing partitions
//! that hold different keys. [`SeparateCairnHash`], a physical optimizer rule run after
//! DataFusion's, finds operators whose children are hash partitioned by different
//! hashes (Cairn's and DataFusion's, or two different Cairn identities) and
//! repartitions the Cairn-partitioned children with DataFusion's hash.

use std::sync::Arc;

use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
use datafusion::error::Result;
use datafusion::physical_optimizer::PhysicalOptimizerRule;
use datafusion::physical_plan::execution_plan::replace_children_if_necessary;
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::{
    Distribution, ExecutionPlan, ExecutionPlanProperties, Partitioning,
};

use crate::scan::CairnScanExec;

/// What makes two Cairn hash partitionings place equal keys in equal partitions: the
/// types of the hashed columns (their key encoding), the bucket count and the seed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashIdentity {
    /// Types of the hash columns, in hashing order.
    pub types: Vec<cairn_common::DataType>,
    /// Number of buckets (= partitions).
    pub buckets: u32,
    /// The level's hash seed.
    pub seed: u32,
}

/// Whose hash function put the rows of a hash-partitioned plan in their partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
enum HashOrigin {
    /// DataFusion's (a `RepartitionExec`).
    DataFusion,
    /// Cairn's, as declared by a scan.
    Cairn(HashIdentity),
}

/// The physical optimizer rule described in the module docs.
#[derive(Debug, Default)]
pub struct SeparateCairnHash;

impl PhysicalOptimizerRule for SeparateCairnHash {
    fn optimize(
        &self,
        plan: Arc<dyn ExecutionPlan>,
        _config: &ConfigOptions,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        plan.transform_up(separate).data()
    }

    fn name(&self) -> &str {
        "cairn_separate_hash"
    }

    fn schema_check(&self) -> bool {
        true
    }
}

/// Repartitions the Cairn-hashed children of `node` when its hash-partitioned children
/// do not all share one hash.
fn separate(node: Arc<dyn ExecutionPlan>) -> Result<Transformed<Arc<dyn ExecutionPlan>>> {
    let children = node.children();
    let origins: Vec<Option<HashOrigin>> = children.iter().map(|c| origin(c)).collect();
    let hashed: Vec<&HashOrigin> = origins.iter().flatten().collect();
    let mixed = hashed.len() >= 2 && hashed.iter().any(|o| *o != hashed[0]);
    if !mixed || !hashed.iter().any(|o| matches!(o, HashOrigin::Cairn(_))) {
        return Ok(Transformed::no(node));
    }
    let required = node.input_distribution_requirements();
    let mut new_children = Vec::with_capacity(children.len());
    for (i, child) in children.into_iter().enumerate() {
        let (Some(HashOrigin::Cairn(_)), Partitioning::Hash(own, n)) =
            (&origins[i], child.output_partitioning())
        else {
            new_children.push(Arc::clone(child));
            continue;
        };
        #[allow(deprecated)]
        let exprs = match required.child_distribution(i) {
            Some(Distribution::KeyPartitioned(e) | Distribution::HashPartitioned(e)) => e.clone(),
            _ => own.clone(),
        };
        let rehashed = RepartitionExec::try_new(Arc::clone(child), Partitioning::Hash(exprs, *n))?;
        new_children.push(Arc::new(rehashed) as Arc<dyn ExecutionPlan>);
    }
    Ok(Transformed::yes(replace_children_if_necessary(
        node,
        new_children,
    )?))
}

/// Whose hash partitions `plan`'s output (`None`: not hash partitioned). Operators
/// other than a repartition or a Cairn scan pass on the hash of a child partitioned
/// alike.
fn origin(plan: &Arc<dyn ExecutionPlan>) -> Option<HashOrigin> {
    let Partitioning::Hash(_, n) = plan.output_partitioning() else {
        return None;
    };
    if let Some(scan) = plan.downcast_ref::<CairnScanExec>() {
        return scan.hash_identity().cloned().map(HashOrigin::Cairn);
    }
    if plan.downcast_ref::<RepartitionExec>().is_some() {
        return Some(HashOrigin::DataFusion);
    }
    plan.children()
        .into_iter()
        .find(|c| matches!(c.output_partitioning(), Partitioning::Hash(_, m) if m == n))
        .map_or(Some(HashOrigin::DataFusion), origin)
}
