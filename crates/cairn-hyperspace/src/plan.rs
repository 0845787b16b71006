//! Search planning (HyperDex §2.3, §3): which regions of which subspace a search must ask.
//!
//! A search is a conjunction of [`ColumnPredicate`]s. On each dimension of a subspace the
//! predicates on that attribute select a set of intervals:
//!
//! | predicate | hashed axis | ordered axis |
//! |---|---|---|
//! | `a = v` | the interval of `c(v)` | the interval of `c(v)` |
//! | `a IN (v…)` | the intervals of each `c(v)` | the intervals of each `c(v)` |
//! | `a > v`, `a BETWEEN …` | every interval | the intervals between the bounds' coordinates |
//! | `a IS NULL` | interval 0 | interval 0 |
//! | none, `IS NOT NULL` | every interval | every interval |
//! | a contradiction | none | none |
//!
//! The search geometrically is the product of those sets (a hyperplane, or an extruded
//! one for ranges), and only the regions in it can hold a matching row. The planner picks
//! the subspace whose product is smallest, as HyperDex's clients do (§3: "clients select
//! the subspace that contacts the fewest servers"). Pruning is conservative: every row
//! that matches lies in a planned region (exclusive bounds are treated as inclusive,
//! hashed ranges as unconstrained), and the regions are still scanned with the full
//! predicate.
//!
//! Within a region, rows are sorted by their [`Cell`], the coordinate on the subspace's
//! first axis; [`cell_bounds`] turns the predicate on that attribute into the cells a
//! match can lie in, so that a region is read as the key range of those cells.

use cairn_common::predicate::simplify_conjunction;
use cairn_common::{ColumnPredicate, PredicateOp};

use crate::coord::{AxisKind, Coordinate, NULL_COORDINATE};
use crate::error::Result;
use crate::grid::{Cell, Dimension, RegionId, Subspace, cell_of};

/// The intervals a search selects on each dimension of one subspace; the regions are
/// their cross product.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RegionSet {
    /// Per dimension, the selected intervals, ascending and distinct.
    pub intervals: Vec<Vec<usize>>,
    /// Per dimension, how many intervals it has.
    radix: Vec<usize>,
}

impl RegionSet {
    /// How many regions the set holds.
    pub fn len(&self) -> usize {
        self.intervals.iter().map(Vec::len).product()
    }

    /// Whether the set is empty (the predicates contradict each other or match only
    /// NULLs where none can be).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The regions, ascending.
    pub fn regions(&self) -> Vec<RegionId> {
        let mut out: Vec<RegionId> = vec![0];
        for (chosen, &n) in self.intervals.iter().zip(&self.radix) {
            out = out
                .iter()
                .flat_map(|&prefix| chosen.iter().map(move |&i| prefix * n as u32 + i as u32))
                .collect();
        }
        out
    }
}

/// The regions of `subspace` that can hold a row matching every predicate of `preds`.
/// Predicates on columns outside the subspace do not narrow it.
pub fn regions_for(subspace: &Subspace, preds: &[ColumnPredicate]) -> Result<RegionSet> {
    let preds = simplify_conjunction(preds);
    let mut intervals = Vec::with_capacity(subspace.dimensions.len());
    for d in &subspace.dimensions {
        let chosen = match preds.iter().find(|p| p.column == d.axis.column) {
            None => (0..d.intervals()).collect(),
            Some(p) => intervals_for(d, &p.op)?,
        };
        intervals.push(chosen);
    }
    Ok(RegionSet {
        intervals,
        radix: subspace
            .dimensions
            .iter()
            .map(Dimension::intervals)
            .collect(),
    })
}

/// The intervals of dimension `d` that can hold a value satisfying `op`.
fn intervals_for(d: &Dimension, op: &PredicateOp) -> Result<Vec<usize>> {
    let all = || (0..d.intervals()).collect::<Vec<_>>();
    let points = |coords: Vec<Coordinate>| {
        let mut v: Vec<usize> = coords.into_iter().map(|c| d.interval_of(c)).collect();
        v.sort_unstable();
        v.dedup();
        v
    };
    Ok(match op {
        PredicateOp::None => vec![],
        PredicateOp::IsNull => vec![d.interval_of(NULL_COORDINATE)],
        PredicateOp::IsNotNull => all(),
        // A NULL operand matches nothing (`a = NULL` is never true).
        PredicateOp::Equality(v) if v.is_null() => vec![],
        PredicateOp::Equality(v) => points(vec![d.axis.coordinate(v)?]),
        PredicateOp::InList(vs) => points(
            vs.iter()
                .filter(|v| !v.is_null())
                .map(|v| d.axis.coordinate(v))
                .collect::<Result<Vec<_>>>()?,
        ),
        PredicateOp::Range { lower, upper } => match d.axis.kind {
            AxisKind::Hashed => {
                // Type-check the bounds even though they cannot prune.
                for (v, _) in lower.iter().chain(upper) {
                    d.axis.coordinate(v)?;
                }
                all()
            }
            AxisKind::Ordered => {
                let (lo, hi) = ordered_bounds(d, lower, upper)?;
                d.intervals_between(lo, hi).collect()
            }
        },
    })
}

/// The cells of `subspace` that can hold a row matching every predicate of `preds`: an
/// inclusive `[low, high]` from the predicate on the subspace's first attribute, or
/// `None` when that predicate does not narrow them (there is none, or it is a range on
/// a hashed axis). Conservative like the regions: exclusive bounds count as inclusive.
pub fn cell_bounds(subspace: &Subspace, preds: &[ColumnPredicate]) -> Result<Option<(Cell, Cell)>> {
    let preds = simplify_conjunction(preds);
    let Some(d) = subspace.dimensions.first() else {
        return Ok(None);
    };
    let Some(p) = preds.iter().find(|p| p.column == d.axis.column) else {
        return Ok(None);
    };
    let coords = match &p.op {
        PredicateOp::IsNull => Some((NULL_COORDINATE, NULL_COORDINATE)),
        PredicateOp::Equality(v) if !v.is_null() => {
            let c = d.axis.coordinate(v)?;
            Some((c, c))
        }
        PredicateOp::InList(vs) => {
            let cs = vs
                .iter()
                .filter(|v| !v.is_null())
                .map(|v| d.axis.coordinate(v))
                .collect::<Result<Vec<_>>>()?;
            cs.iter().min().copied().zip(cs.iter().max().copied())
        }
        PredicateOp::Range { lower, upper } if d.axis.kind == AxisKind::Ordered => {
            Some(ordered_bounds(d, lower, upper)?)
        }
        _ => None,
    };
    Ok(coords.map(|(lo, hi)| (cell_of(lo), cell_of(hi))))
}

/// The inclusive coordinates a range on ordered dimension `d` spans. Ranges never
/// match NULL, so an unbounded low end is the first non-null coordinate.
fn ordered_bounds(d: &Dimension, lower: &Bound, upper: &Bound) -> Result<(Coordinate, Coordinate)> {
    let lo = match lower {
        Some((v, _)) => d.axis.coordinate(v)?.max(NULL_COORDINATE + 1),
        None => NULL_COORDINATE + 1,
    };
    let hi = match upper {
        Some((v, _)) => d.axis.coordinate(v)?,
        None => u64::MAX,
    };
    Ok((lo, hi))
}

/// One end of a range predicate: the value and whether it is inclusive.
type Bound = Option<(cairn_common::Value, bool)>;

/// The plan of a search: the subspace to ask and its regions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SearchPlan {
    /// The chosen subspace's position in the table's subspace list.
    pub subspace: usize,
    /// The regions to ask, ascending.
    pub regions: Vec<RegionId>,
    /// How many regions the subspace has (for `EXPLAIN`'s `regions=k/N`).
    pub total_regions: u32,
}

/// Picks the subspace whose intersecting regions are fewest for the conjunction
/// `preds`, among the subspaces that the predicates constrain at all. Ties go to the
/// subspace that prunes the larger share of its grid, then to the first declared.
/// `None` when no subspace is constrained: the search is no narrower in any subspace
/// than a scan of the key subspace.
pub fn plan_search(
    subspaces: &[Subspace],
    preds: &[ColumnPredicate],
) -> Result<Option<SearchPlan>> {
    let mut best: Option<(usize, RegionSet, u32)> = None;
    for (i, s) in subspaces.iter().enumerate() {
        // Only a predicate on one of its attributes narrows a subspace. The others are
        // skipped before their regions are listed: an unconstrained fine grid lists
        // tens of thousands, which would cost a point search more than its scan.
        let constrained = preds
            .iter()
            .any(|p| s.dimensions.iter().any(|d| d.axis.column == p.column));
        if !constrained {
            continue;
        }
        let set = regions_for(s, preds)?;
        let total = s.region_count();
        let better = match &best {
            None => true,
            Some((_, b, b_total)) => {
                let (n, bn) = (set.len() as u64, b.len() as u64);
                // n / total < bn / b_total, compared without division.
                n < bn || (n == bn && n * u64::from(*b_total) < bn * u64::from(total))
            }
        };
        if better {
            best = Some((i, set, total));
        }
    }
    Ok(best.map(|(subspace, set, total_regions)| SearchPlan {
        subspace,
        regions: set.regions(),
        total_regions,
    }))
}

/// A run of regions `[first, last]` that one key-range scan of a region table reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RegionRun {
    /// The first region of the run.
    pub first: RegionId,
    /// The last region of the run (inclusive).
    pub last: RegionId,
    /// Whether every region in `[first, last]` was asked for (otherwise the scan must
    /// also filter on the region list).
    pub dense: bool,
}

/// Groups ascending, distinct `regions` into at most `max_runs` runs for key-range scans:
/// contiguous regions form one run, and while there are too many runs the two with the
/// smallest gap between them merge (the merged run then reads the gap too, and is not
/// dense). Every region asked for lies in exactly one run.
pub fn region_runs(regions: &[RegionId], max_runs: usize) -> Vec<RegionRun> {
    let mut runs: Vec<RegionRun> = Vec::new();
    for &r in regions {
        match runs.last_mut() {
            Some(run) if run.last.checked_add(1) == Some(r) => run.last = r,
            _ => runs.push(RegionRun {
                first: r,
                last: r,
                dense: true,
            }),
        }
    }
    let max_runs = max_runs.max(1);
    if runs.len() > max_runs {
        // Merge across the largest-but-needed number of the smallest gaps: keep the
        // `max_runs - 1` widest gaps as boundaries.
        let mut gaps: Vec<(u32, usize)> = runs
            .windows(2)
            .enumerate()
            .map(|(i, w)| (w[1].first - w[0].last, i))
            .collect();
        gaps.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let mut keep: Vec<usize> = gaps[..max_runs - 1].iter().map(|&(_, i)| i).collect();
        keep.sort_unstable();
        let mut merged = Vec::with_capacity(max_runs);
        let mut start = 0;
        for end in keep.into_iter().chain(std::iter::once(runs.len() - 1)) {
            merged.push(RegionRun {
                first: runs[start].first,
                last: runs[end].last,
                dense: start == end,
            });
            start = end + 1;
        }
        runs = merged;
    }
    runs
}

/// For a top-k search ordered by attribute `column` (HyperDex's `sorted_search`): the
/// planned regions of `subspace` grouped by their interval on `column`, in the order the
/// results are wanted. A caller asks the groups one after another and stops once it holds
/// `k` rows and the next group's interval starts past its `k`-th value. `None` when
/// `column` is not an ordered axis of the subspace.
pub fn sorted_groups(
    subspace: &Subspace,
    preds: &[ColumnPredicate],
    column: &str,
    ascending: bool,
) -> Result<Option<Vec<Vec<RegionId>>>> {
    let Some(dim) = subspace
        .dimensions
        .iter()
        .position(|d| d.axis.column == column && d.axis.kind == AxisKind::Ordered)
    else {
        return Ok(None);
    };
    let set = regions_for(subspace, preds)?;
    let mut order = set.intervals[dim].clone();
    if !ascending {
        order.reverse();
    }
    let groups = order
        .into_iter()
        .map(|i| {
            let mut one = set.clone();
            one.intervals[dim] = vec![i];
            one.regions()
        })
        .collect();
    Ok(Some(groups))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coord::Axis;
    use cairn_common::{DataType, Value};
    use proptest::prelude::*;

    fn space() -> Subspace {
        Subspace::new(
            "ab",
            vec![
                Axis::new("a", DataType::Int64),
                Axis::new("b", DataType::String),
            ],
            16,
        )
        .unwrap()
    }

    fn int(v: i64) -> Value {
        Value::Int64(v)
    }

    #[test]
    fn equality_on_every_attribute_is_one_region() {
        let s = space();
        let preds = vec![
            ColumnPredicate::eq("a", int(5)),
            ColumnPredicate::eq("b", Value::String("x".into())),
        ];
        let set = regions_for(&s, &preds).unwrap();
        assert_eq!(set.len(), 1);
        let want = s
            .region_of_values(&[&int(5), &Value::String("x".into())])
            .unwrap();
        assert_eq!(set.regions(), vec![want]);
    }

    #[test]
    fn one_attribute_of_two_is_a_row_of_the_grid() {
        let s = space();
        let set = regions_for(&s, &[ColumnPredicate::eq("b", Value::String("x".into()))]).unwrap();
        assert_eq!(set.len(), 4);
        // A string range cannot prune; an integer range can.
        let set = regions_for(
            &s,
            &[ColumnPredicate::range(
                "b",
                Value::String("a".into()),
                Value::String("c".into()),
            )],
        )
        .unwrap();
        assert_eq!(set.len(), 16);
        let set = regions_for(&s, &[ColumnPredicate::lt("a", int(0))]).unwrap();
        assert_eq!(set.len(), 4);
    }

    #[test]
    fn contradictions_and_null_operands_select_nothing() {
        let s = space();
        let preds = vec![
            ColumnPredicate::eq("a", int(1)),
            ColumnPredicate::eq("a", int(2)),
        ];
        assert!(regions_for(&s, &preds).unwrap().is_empty());
        assert!(
            regions_for(&s, &[ColumnPredicate::eq("a", Value::Null)])
                .unwrap()
                .is_empty()
        );
        assert_eq!(
            regions_for(&s, &[ColumnPredicate::is_null("a")])
                .unwrap()
                .len(),
            4
        );
    }

    #[test]
    fn wrong_typed_predicates_are_errors() {
        let s = space();
        assert!(regions_for(&s, &[ColumnPredicate::eq("a", Value::String("x".into()))]).is_err());
    }

    #[test]
    fn the_narrowest_subspace_wins() {
        let a = Subspace::new("a", vec![Axis::new("a", DataType::Int64)], 8).unwrap();
        let bc = Subspace::new(
            "bc",
            vec![
                Axis::new("b", DataType::Int64),
                Axis::new("c", DataType::Int64),
            ],
            64,
        )
        .unwrap();
        let subs = vec![a, bc];
        // Only a: subspace 0, one region of 8.
        let p = plan_search(&subs, &[ColumnPredicate::eq("a", int(3))])
            .unwrap()
            .unwrap();
        assert_eq!((p.subspace, p.regions.len(), p.total_regions), (0, 1, 8));
        // b and c fixed: one region of 64 beats one of 8 on a share of the grid.
        let preds = vec![
            ColumnPredicate::eq("a", int(3)),
            ColumnPredicate::eq("b", int(3)),
            ColumnPredicate::eq("c", int(4)),
        ];
        let p = plan_search(&subs, &preds).unwrap().unwrap();
        assert_eq!((p.subspace, p.regions.len()), (1, 1));
        // Only b: 8 regions in bc against all 8 of a, which is not constrained.
        let p = plan_search(&subs, &[ColumnPredicate::eq("b", int(3))])
            .unwrap()
            .unwrap();
        assert_eq!((p.subspace, p.regions.len()), (1, 8));
        // Nothing on a subspace attribute: no plan.
        assert!(
            plan_search(&subs, &[ColumnPredicate::eq("z", int(3))])
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn sorted_groups_follow_the_axis() {
        let s = space();
        let asc = sorted_groups(&s, &[], "a", true).unwrap().unwrap();
        assert_eq!(asc.len(), 4);
        assert!(asc.iter().all(|g| g.len() == 4));
        let desc = sorted_groups(&s, &[], "a", false).unwrap().unwrap();
        assert_eq!(asc.first(), desc.last());
        assert!(sorted_groups(&s, &[], "b", true).unwrap().is_none());
    }

    fn arb_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            1 => Just(Value::Null),
            8 => (-1000i64..1000).prop_map(Value::Int64),
            1 => any::<i64>().prop_map(Value::Int64),
        ]
    }

    fn arb_str() -> impl Strategy<Value = Value> {
        prop_oneof![
            1 => Just(Value::Null),
            6 => "[a-d]{0,2}".prop_map(Value::String),
        ]
    }

    fn arb_pred_a() -> impl Strategy<Value = ColumnPredicate> {
        let v = || -1200i64..1200;
        prop_oneof![
            v().prop_map(|x| ColumnPredicate::eq("a", Value::Int64(x))),
            v().prop_map(|x| ColumnPredicate::lt("a", Value::Int64(x))),
            v().prop_map(|x| ColumnPredicate::le("a", Value::Int64(x))),
            v().prop_map(|x| ColumnPredicate::gt("a", Value::Int64(x))),
            v().prop_map(|x| ColumnPredicate::ge("a", Value::Int64(x))),
            (v(), v()).prop_map(|(x, y)| ColumnPredicate::range(
                "a",
                Value::Int64(x),
                Value::Int64(y)
            )),
            proptest::collection::vec(v(), 0..4).prop_map(|xs| ColumnPredicate::in_list(
                "a",
                xs.into_iter().map(Value::Int64).collect()
            )),
            Just(ColumnPredicate::is_null("a")),
            Just(ColumnPredicate::is_not_null("a")),
        ]
    }

    fn arb_pred_b() -> impl Strategy<Value = ColumnPredicate> {
        prop_oneof![
            "[a-d]{0,2}".prop_map(|x| ColumnPredicate::eq("b", Value::String(x))),
            ("[a-d]{0,2}", "[a-d]{0,2}").prop_map(|(x, y)| ColumnPredicate::range(
                "b",
                Value::String(x),
                Value::String(y)
            )),
            proptest::collection::vec("[a-d]{0,2}", 0..3).prop_map(|xs| ColumnPredicate::in_list(
                "b",
                xs.into_iter().map(Value::String).collect()
            )),
            Just(ColumnPredicate::is_null("b")),
        ]
    }

    proptest! {
        /// Pruning is sound: every row that matches lies in a planned region, whatever
        /// the grid (default or sampled) and the predicates.
        #[test]
        fn every_matching_row_is_in_a_planned_region(
            rows in proptest::collection::vec((arb_value(), arb_str()), 1..80),
            sample in proptest::collection::vec((arb_value(), arb_str()), 0..60),
            preds in proptest::collection::vec(prop_oneof![arb_pred_a(), arb_pred_b()], 0..4),
            n in 1u32..40,
        ) {
            let axes = vec![Axis::new("a", DataType::Int64), Axis::new("b", DataType::String)];
            let sample: Vec<Vec<Value>> = sample.into_iter().map(|(a, b)| vec![a, b]).collect();
            let s = Subspace::from_sample("ab", axes.clone(), n, &sample).unwrap();
            let planned = regions_for(&s, &preds).unwrap().regions();
            prop_assert!(planned.windows(2).all(|w| w[0] < w[1]));
            // The same attributes with the hashed one first, for its cells.
            let flipped: Vec<Vec<Value>> =
                sample.iter().map(|r| vec![r[1].clone(), r[0].clone()]).collect();
            let axes_ba = axes.into_iter().rev().collect();
            let ba = Subspace::from_sample("ba", axes_ba, n, &flipped).unwrap();
            let schema = crate::grid::tests::kab_schema();
            for (a, b) in &rows {
                let matches = preds.iter().all(|p| {
                    p.matches_value(if p.column == "a" { a } else { b })
                });
                if matches {
                    let r = s.region_of_values(&[a, b]).unwrap();
                    prop_assert!(planned.contains(&r), "row ({a:?}, {b:?}) in region {r} not planned {planned:?} for {preds:?}");
                    let row = vec![Value::Int64(1), a.clone(), b.clone()];
                    for sub in [&s, &ba] {
                        let (_, cell) = sub.place_of_row(&schema, &row).unwrap();
                        if let Some((lo, hi)) = cell_bounds(sub, &preds).unwrap() {
                            prop_assert!(
                                lo <= cell && cell <= hi,
                                "row ({a:?}, {b:?}) in cell {cell} outside [{lo}, {hi}] of {} for {preds:?}",
                                sub.name
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn region_runs_cover_every_region_within_the_limit() {
        assert_eq!(region_runs(&[], 4), vec![]);
        let run = |first, last, dense| RegionRun { first, last, dense };
        assert_eq!(
            region_runs(&[1, 2, 3, 7, 8, 20], 8),
            vec![run(1, 3, true), run(7, 8, true), run(20, 20, true)]
        );
        assert_eq!(
            region_runs(&[1, 2, 3, 7, 8, 20], 2),
            vec![run(1, 8, false), run(20, 20, true)]
        );
        assert_eq!(region_runs(&[1, 5, 9], 1), vec![run(1, 9, false)]);
    }

    proptest! {
        #[test]
        fn region_runs_are_sound(
            mut regions in proptest::collection::vec(0u32..500, 0..200),
            max_runs in 1usize..20,
        ) {
            regions.sort_unstable();
            regions.dedup();
            let runs = region_runs(&regions, max_runs);
            prop_assert!(runs.len() <= max_runs);
            for w in runs.windows(2) {
                prop_assert!(w[0].last < w[1].first);
            }
            for &r in &regions {
                prop_assert_eq!(runs.iter().filter(|x| x.first <= r && r <= x.last).count(), 1);
            }
            for x in &runs {
                let inside = regions.iter().filter(|&&r| x.first <= r && r <= x.last).count();
                prop_assert!(inside > 0);
                prop_assert_eq!(x.dense, inside as u32 == x.last - x.first + 1);
            }
        }
    }
}
