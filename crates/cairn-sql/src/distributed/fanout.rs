//! Bounded fan-out: no worker exchanges a query's rows with more than N_max others.
//!
//! A shuffle as the distributed planner draws it is all-to-all: every task of the
//! stage above reads from every task of the stage below, so on a cluster of *W*
//! workers each worker talks to all *W − 1* others, and gathering a stage of *W*
//! tasks into the front end makes it talk to *W* workers at once. HRDBMS
//! ("HRDBMS: Combining the Best of Modern and Traditional Relational Databases",
//! §3, "Enforcing Scalable Communication") caps the neighbours of a node at
//! N_max: hierarchical work (merges, aggregations, the gather into the
//! coordinator) runs as a tree of fan-out at most N_max − 1, and all-to-all
//! exchanges go through hub nodes that forward rows for the others.
//!
//! Cairn does it with the stages `datafusion-distributed` already has. When the
//! cluster has more workers than the session's `cairn.n_max`, the workers (in
//! address order) form [`Topology`]'s *G* groups of at most *s* workers; the first
//! worker of each group is its hub, and *G* and *s* are chosen so that a hub's
//! neighbours, *s − 1* members, *G − 1* other hubs and the front end, number at
//! most N_max. Then:
//! - a stage that reads tablets runs where its tablets are, as before, but its
//!   tasks are laid out group by group (padded with empty tasks, which run on their
//!   group's hub) and a *relay* stage of *G* tasks, task *k* on hub *k*, gathers
//!   group *k*'s tasks ([`bound`]): a tree level of fan-out at most *s*. A relay
//!   re-applies what the stage's consumers expect: the hash repartition of a
//!   shuffle, the broadcast of a broadcast join's build side, or the merge of a
//!   sort (so a distributed sort is a merge tree);
//! - every other stage (those reading shuffles, broadcasts or relays) asks for at
//!   most *G* tasks ([`super::tasks::desired_task_count`]) and runs on the hubs
//!   ([`super::tasks::route_tasks`]), so shuffles among the hubs are the only
//!   all-to-all exchanges, and the front end reads from hubs only.
//!
//! A member worker's neighbours are its hub; a hub's are its members, the other
//! hubs and the front end. The price is parallelism above the scans: *G* tasks
//! instead of *W*, and the scans of a stage that also reads an exchange (the probe
//! side of a broadcast join) run on the hubs, reading their tablets over the
//! network, as do scan stages of one task and unions of scans, which the relays
//! do not split. Not bounded: the coordinator sends each task's plan to the worker
//! running it directly (the library's control channel); an N_max below about 2√W,
//! which two levels cannot meet (the fewest neighbours possible are used); and
//! the library's optional partial reduction before shuffles
//! (`distributed.partial_reduce`), whose stages keep their all-to-all shuffle.
//! The topology is computed when the plan is made and again when its tasks are
//! routed, so a worker lost in between shifts the groups for that query.

use std::sync::Arc;

use datafusion::common::Result;
use datafusion::common::tree_node::{Transformed, TreeNode, TreeNodeRecursion};
use datafusion::physical_plan::repartition::RepartitionExec;
use datafusion::physical_plan::sorts::sort_preserving_merge::SortPreservingMergeExec;
use datafusion::physical_plan::{ChildrenPropertiesMode, ExecutionPlan, ReplaceChildrenOptions};
use datafusion::prelude::SessionConfig;
use datafusion_distributed::{
    BroadcastExec, DistributedLeafExec, NetworkBoundary, NetworkBoundaryExt, NetworkBroadcastExec,
    NetworkCoalesceExec, NetworkShuffleExec, Stage,
};

use super::tasks::task_homes;
use super::worker::worker_addrs;
use crate::options::CairnOptions;
use crate::scan::CairnScanExec;

/// The groups and hubs of a cluster whose fan-out is bounded (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Topology {
    /// The workers' addresses (`host:port`), sorted.
    workers: Vec<String>,
    /// How many groups (and hubs) there are: *G*.
    groups: usize,
}

impl Topology {
    /// The topology bounding `workers` to `n_max` neighbours each; `None` when no
    /// bound is needed (`n_max` is 0, or every worker may talk to every other and
    /// the front end). The most groups that keep a hub within the bound are
    /// chosen (more groups, more tasks above the scans); when none does, because
    /// `n_max` is below about 2√W, the groups that give the fewest neighbours.
    pub(crate) fn new(mut workers: Vec<String>, n_max: usize) -> Option<Topology> {
        workers.sort_unstable();
        workers.dedup();
        let w = workers.len();
        if n_max == 0 || w <= n_max {
            return None;
        }
        let groups = (1..=w)
            .rev()
            .find(|&g| hub_neighbours(w, g) <= n_max)
            .or_else(|| (1..=w).min_by_key(|&g| (hub_neighbours(w, g), std::cmp::Reverse(g))))
            .unwrap_or(1);
        Some(Topology { workers, groups })
    }

    /// The topology of a session's cluster: its workers (the distributed worker
    /// resolver) bounded by its `cairn.n_max`.
    pub(crate) fn of_session(config: &SessionConfig) -> Option<Topology> {
        let n_max = config
            .options()
            .extensions
            .get::<CairnOptions>()
            .map(|o| o.n_max)?;
        if n_max == 0 {
            return None;
        }
        Topology::new(worker_addrs(config)?, n_max)
    }

    /// How many groups (and hubs) there are.
    pub(crate) fn groups(&self) -> usize {
        self.groups
    }

    /// The positions (in address order) of group `k`'s workers: the workers split
    /// into `groups` runs whose lengths differ by at most one.
    fn group(&self, k: usize) -> std::ops::Range<usize> {
        let (base, extra) = (
            self.workers.len() / self.groups,
            self.workers.len() % self.groups,
        );
        let start = k * base + k.min(extra);
        start..start + base + usize::from(k < extra)
    }

    /// The group of the worker at `addr`, if it is one.
    pub(crate) fn group_of(&self, addr: &str) -> Option<usize> {
        let at = self.workers.iter().position(|w| w == addr)?;
        (0..self.groups).find(|&k| self.group(k).contains(&at))
    }

    /// Group `k`'s hub: its first worker.
    pub(crate) fn hub(&self, k: usize) -> &str {
        &self.workers[self.group(k).start]
    }

    /// The hub task `t` of a stage above the scans runs on.
    pub(crate) fn hub_of_task(&self, t: usize) -> &str {
        self.hub(t % self.groups)
    }

    /// The most neighbours any worker has.
    #[cfg(test)]
    pub(crate) fn max_neighbours(&self) -> usize {
        hub_neighbours(self.workers.len(), self.groups)
    }
}

/// Whether `plan` is a union whose children run in tasks of their own
/// (`ChildrenIsolatorUnionExec`, which the library does not export, so it is known
/// by name).
pub(crate) fn is_union(plan: &Arc<dyn ExecutionPlan>) -> bool {
    plan.name() == "ChildrenIsolatorUnionExec"
}

/// Whether some node of `plan` above its network boundaries (the stage's own
/// nodes, and the boundaries themselves) satisfies `f`.
fn in_stage(plan: &Arc<dyn ExecutionPlan>, f: impl Fn(&Arc<dyn ExecutionPlan>) -> bool) -> bool {
    let mut found = false;
    let _ = plan.apply(|n| {
        if f(n) {
            found = true;
            return Ok(TreeNodeRecursion::Stop);
        }
        if n.is_network_boundary() {
            return Ok(TreeNodeRecursion::Jump);
        }
        Ok(TreeNodeRecursion::Continue)
    });
    found
}

/// A hub's neighbours with `w` workers in `g` groups: the other members of the
/// largest group, the other hubs and the front end.
fn hub_neighbours(w: usize, g: usize) -> usize {
    w.div_ceil(g) - 1 + (g - 1) + 1
}

/// `plan`, a distributed plan of a session on a cluster whose fan-out is bounded,
/// with a relay stage above every stage that reads tablets (see the module docs);
/// any other plan unchanged.
pub(crate) fn bound(
    plan: Arc<dyn ExecutionPlan>,
    config: &SessionConfig,
) -> Result<Arc<dyn ExecutionPlan>> {
    let Some(topology) = Topology::of_session(config) else {
        return Ok(plan);
    };
    // A stage of this query to stamp new ones from, and the next free stage number.
    let mut template = None;
    let mut next = 1;
    plan.apply(|n| {
        if let Some(nb) = n.as_network_boundary()
            && let Stage::Local(local) = nb.input_stage()
        {
            next = next.max(local.num + 1);
            template.get_or_insert_with(|| nb.input_stage().clone());
        }
        Ok(TreeNodeRecursion::Continue)
    })?;
    let Some(template) = template else {
        return Ok(plan);
    };
    Relays {
        topology,
        template,
        next,
    }
    .rewrite(plan, None)
}

/// Puts relays into one plan.
struct Relays {
    topology: Topology,
    /// One of the plan's stages: new stages copy its query id.
    template: Stage,
    /// The next free stage number.
    next: usize,
}

impl Relays {
    /// `node` with relays above the stages that read tablets anywhere below it;
    /// `merge` is the sort-preserving merge `node` sits under, if any.
    fn rewrite(
        &mut self,
        node: Arc<dyn ExecutionPlan>,
        merge: Option<&SortPreservingMergeExec>,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let spm = node.downcast_ref::<SortPreservingMergeExec>();
        let mut changed = false;
        let mut children = Vec::with_capacity(node.children().len());
        for child in node.children() {
            let new = self.rewrite(Arc::clone(child), spm)?;
            changed |= !Arc::ptr_eq(&new, child);
            children.push(new);
        }
        let node = if changed {
            node.replace_children(
                children,
                ReplaceChildrenOptions::new(ChildrenPropertiesMode::Recompute),
            )?
        } else {
            node
        };
        Ok(self.relay(&node, merge)?.unwrap_or(node))
    }

    /// `node`, if a network boundary, reading its stage through a relay stage, if
    /// that stage reads tablets in more than one task and can be laid out by group;
    /// `None` otherwise.
    fn relay(
        &mut self,
        node: &Arc<dyn ExecutionPlan>,
        merge: Option<&SortPreservingMergeExec>,
    ) -> Result<Option<Arc<dyn ExecutionPlan>>> {
        let Some(nb) = node.as_network_boundary() else {
            return Ok(None);
        };
        let Stage::Local(stage) = nb.input_stage() else {
            return Ok(None);
        };
        if in_stage(&stage.plan, is_union) {
            return Ok(None);
        }
        if in_stage(&stage.plan, |n| n.is_network_boundary()) {
            // A stage above the scans: it runs on the hubs, its scans too.
            let plan = self.on_hubs(&stage.plan)?;
            if Arc::ptr_eq(&plan, &stage.plan) {
                return Ok(None);
            }
            return Ok(Some(self.restage(
                nb,
                Some((plan, stage.tasks)),
                stage.num,
            )?));
        }
        if stage.tasks <= 1 {
            return Ok(None);
        }
        // What the stage computes, without the head that fans it out.
        let head = &stage.plan;
        let shuffle = head
            .downcast_ref::<RepartitionExec>()
            .filter(|_| node.is::<NetworkShuffleExec>());
        let broadcast = head
            .downcast_ref::<BroadcastExec>()
            .filter(|_| node.is::<NetworkBroadcastExec>());
        let body = match (shuffle, broadcast) {
            (Some(r), _) => Arc::clone(r.input()),
            (_, Some(b)) => Arc::clone(b.input()),
            _ if node.is::<NetworkCoalesceExec>() => Arc::clone(head),
            _ => return Ok(None),
        };
        // The gather reads the body as it is (ProducerHead::None), and a worker
        // strips a repartition or broadcast off the head of what it runs for one.
        if body.is::<RepartitionExec>() || body.is::<BroadcastExec>() {
            return Ok(None);
        }
        let Some((body, per_group)) = self.by_group(&body, stage.tasks)? else {
            return Ok(None);
        };
        let g = self.topology.groups();
        let gather = NetworkCoalesceExec::try_new(body, g * per_group, g)?;
        let num = self.next;
        self.next += 1;
        let gather = self.restage(&gather, None, num)?;
        let relay: Arc<dyn ExecutionPlan> = match (shuffle, broadcast, merge) {
            (Some(r), _, _) => {
                Arc::new(RepartitionExec::try_new(gather, r.partitioning().clone())?)
            }
            (_, Some(b), _) => Arc::new(BroadcastExec::new(gather, b.consumer_task_count())),
            (_, _, Some(spm)) => Arc::new(
                SortPreservingMergeExec::new(spm.expr().clone(), gather).with_fetch(spm.fetch()),
            ),
            _ => gather,
        };
        let relay_stage = Some((relay.clone(), g));
        let out = if shuffle.is_some() {
            // The consumers keep their partitions: the relays hash as the stage did.
            self.restage(nb, relay_stage, stage.num)?
        } else if let Some(b) = relay.downcast_ref::<BroadcastExec>() {
            let one = Arc::new(BroadcastExec::new(Arc::clone(b.input()), 1));
            self.restage(
                &NetworkBroadcastExec::try_new(one, g)?,
                relay_stage,
                stage.num,
            )?
        } else {
            // A gather's consumer stage has one task: the library plans every
            // coalesce under a CoalescePartitionsExec or SortPreservingMergeExec.
            let gathered = NetworkCoalesceExec::try_new(relay, g, 1)?;
            self.restage(&gathered, relay_stage, stage.num)?
        };
        Ok(Some(out))
    }

    /// `nb` reading stage `num`, which runs `plan` in `tasks` tasks when given
    /// (else the plan and tasks `nb` was built with).
    fn restage(
        &self,
        nb: &dyn NetworkBoundary,
        plan: Option<(Arc<dyn ExecutionPlan>, usize)>,
        num: usize,
    ) -> Result<Arc<dyn ExecutionPlan>> {
        let (Stage::Local(mut local), Stage::Local(own)) =
            (self.template.clone(), nb.input_stage().clone())
        else {
            return datafusion::common::internal_err!("a stage being planned is already remote");
        };
        (local.plan, local.tasks) = plan.unwrap_or((own.plan, own.tasks));
        local.num = num;
        local.metrics_set = Default::default();
        Ok(nb.with_input_stage(Stage::Local(local))?)
    }

    /// `plan`, a stage that reads other stages and runs on the hubs (task *t* on
    /// hub *t* mod *G*), with the scans of its own tablets saying so: EXPLAIN shows
    /// where they run, and they read the hub's replicas first.
    fn on_hubs(&self, plan: &Arc<dyn ExecutionPlan>) -> Result<Arc<dyn ExecutionPlan>> {
        let moved = Arc::clone(plan).transform_down(|n| {
            if n.is_network_boundary() {
                return Ok(Transformed::new(n, false, TreeNodeRecursion::Jump));
            }
            let Some(leaf) = n.downcast_ref::<DistributedLeafExec>() else {
                return Ok(Transformed::no(n));
            };
            let variants = leaf.variants().iter().enumerate().map(|(t, v)| {
                match v.downcast_ref::<CairnScanExec>() {
                    Some(scan) => Arc::new(scan.read_at(self.topology.hub_of_task(t)))
                        as Arc<dyn ExecutionPlan>,
                    None => Arc::clone(v),
                }
            });
            let leaf = DistributedLeafExec::try_new(Arc::clone(leaf.original()), variants)?;
            Ok(Transformed::yes(Arc::new(leaf) as Arc<dyn ExecutionPlan>))
        })?;
        Ok(moved.data)
    }

    /// `body`, a stage of `tasks` tasks reading tablets, laid out group by group:
    /// group *k*'s tasks (by the server each runs on) in slots *k·m* … *k·m + m − 1*,
    /// where *m* is the most tasks any group has, the slots left over padded with
    /// empty scans that run on the group's hub. With *m*; `None` when some leaf of
    /// the stage is not a split Cairn scan.
    fn by_group(
        &self,
        body: &Arc<dyn ExecutionPlan>,
        tasks: usize,
    ) -> Result<Option<(Arc<dyn ExecutionPlan>, usize)>> {
        let Some(homes) = task_homes(body, tasks) else {
            return Ok(None);
        };
        let g = self.topology.groups();
        // Each task's group: that of the first server it would run on that is a
        // worker (as the routing picks it); a task with none (an empty share)
        // goes to a group in turn and runs on its hub.
        let mut members: Vec<Vec<(usize, bool)>> = vec![Vec::new(); g];
        for (t, ranked) in homes.iter().enumerate() {
            match ranked.iter().find_map(|a| self.topology.group_of(a)) {
                Some(k) => members[k].push((t, false)),
                None => members[t % g].push((t, true)),
            }
        }
        let per_group = members.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let slots: Vec<(usize, Option<(usize, bool)>)> = (0..g)
            .flat_map(|k| (0..per_group).map(move |j| (k, j)))
            .map(|(k, j)| (k, members[k].get(j).copied()))
            .collect();
        let mut splittable = true;
        let laid_out = Arc::clone(body).transform_up(|n| {
            if n.children().is_empty() && !n.is::<DistributedLeafExec>() {
                splittable = false;
            }
            let Some(leaf) = n.downcast_ref::<DistributedLeafExec>() else {
                return Ok(Transformed::no(n));
            };
            let Some(scan) = leaf.original().downcast_ref::<CairnScanExec>() else {
                splittable = false;
                return Ok(Transformed::no(n));
            };
            if leaf.variants().len() != tasks {
                splittable = false;
                return Ok(Transformed::no(n));
            }
            let pad = leaf.properties().partitioning.partition_count();
            let hub = |k: usize| self.topology.hub(k).to_string();
            let variants = slots.iter().map(|&(k, t)| match t {
                Some((t, false)) => Arc::clone(&leaf.variants()[t]),
                Some((t, true)) => match leaf.variants()[t].downcast_ref::<CairnScanExec>() {
                    Some(homeless) => Arc::new(homeless.read_at(&hub(k))) as Arc<dyn ExecutionPlan>,
                    None => Arc::clone(&leaf.variants()[t]),
                },
                None => Arc::new(scan.share(&[], pad, Some(hub(k)))) as Arc<dyn ExecutionPlan>,
            });
            let leaf = DistributedLeafExec::try_new(Arc::clone(leaf.original()), variants)?;
            Ok(Transformed::yes(Arc::new(leaf) as Arc<dyn ExecutionPlan>))
        })?;
        Ok(splittable.then_some((laid_out.data, per_group)))
    }
}

#[cfg(test)]
mod tests;
