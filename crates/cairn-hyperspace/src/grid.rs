//! Region grids: how a subspace's hyperspace is tessellated into regions (HyperDex §2.2,
//! §3).
//!
//! A subspace of `d` attributes is a `d`-dimensional space. Each dimension is cut into
//! intervals at sorted *cut points*; the cross product of the intervals is a grid of
//! hyper-rectangular [regions](RegionId), and each region is one Raft-replicated tablet
//! that holds the full rows whose coordinates fall in it (HyperDex §3.2 keeps full
//! copies too). A subspace asks for about `N` regions; each dimension gets about
//! `N^(1/d)` intervals ([`intervals_per_dimension`]), so a search that fixes one
//! attribute of two touches about `√N` regions, and one that fixes both touches one.
//!
//! Cut points come from one of two places:
//! - a **sample** of the data, when a subspace is built over an existing table: the cuts
//!   are the sample's quantiles on each axis ([`cuts_from_sample`]), so every interval
//!   holds about the same number of rows however skewed the values are;
//! - a **default** when there is no data yet ([`default_cuts`]): even cuts of a hashed
//!   axis, and cuts at powers of two between 1 and 2^53 on an ordered axis.
//!
//! Interval `i` of a dimension holds coordinates `cuts[i-1] <= c < cuts[i]` (with
//! `cuts[-1] = 0` and `cuts[len] = ∞`), so interval 0 always holds NULL.

use cairn_common::{Schema, Value};

use crate::coord::{Axis, AxisKind, Coordinate, NULL_COORDINATE, ordered};
use crate::error::{HyperspaceError, Result};

/// A region's number within its subspace: the mixed-radix number of its intervals, the
/// first dimension most significant. Regions are numbered `0..region_count()`.
pub type RegionId = u32;

/// An object's place within its region: its coordinate on the subspace's first axis,
/// as a signed integer of the same order ([`cell_of`]). A region table's key is the
/// region, then the cell, then the object's key, so a region's rows are sorted by the
/// subspace's first attribute: a search that fixes or bounds that attribute reads only
/// the key range of matching cells instead of the whole region (an index within each
/// region), and a change of the attribute that stays in its region still moves the row.
pub type Cell = i64;

/// Where a row is stored in a subspace: its region and its cell within the region.
pub type Place = (RegionId, Cell);

/// The cell of coordinate `c`: `c` with its top bit flipped, so that cells compare as
/// signed integers the way coordinates compare unsigned.
pub fn cell_of(c: Coordinate) -> Cell {
    (c ^ (1 << 63)) as i64
}

/// The most regions one subspace may ask for. Each region is a tablet with its own Raft
/// group, so this is a sanity bound on what a cluster can host, not a format limit.
pub const MAX_REGIONS: u32 = 1 << 16;

/// The most attributes one subspace may have. HyperDex §3 keeps subspaces small: the
/// number of regions a partial search touches grows with the dimensions left free.
pub const MAX_DIMENSIONS: usize = 8;

/// One axis of a subspace and where its intervals are cut.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Dimension {
    /// The attribute and its coordinate mapping.
    pub axis: Axis,
    /// Strictly increasing cut points, all above [`NULL_COORDINATE`]; `cuts.len() + 1`
    /// intervals. Shared: a fine grid has tens of thousands of cuts, and layouts are
    /// cloned on every search and every chained write.
    pub cuts: std::sync::Arc<[Coordinate]>,
}

impl Dimension {
    /// How many intervals this dimension has.
    pub fn intervals(&self) -> usize {
        self.cuts.len() + 1
    }

    /// The interval holding coordinate `c`.
    pub fn interval_of(&self, c: Coordinate) -> usize {
        self.cuts.partition_point(|&cut| cut <= c)
    }

    /// The intervals that hold any coordinate in `lo..=hi` (empty when `lo > hi`).
    pub fn intervals_between(&self, lo: Coordinate, hi: Coordinate) -> std::ops::Range<usize> {
        if lo > hi {
            return 0..0;
        }
        self.interval_of(lo)..self.interval_of(hi) + 1
    }

    /// The coordinates interval `i` covers, `(low, high)` inclusive.
    pub fn bounds(&self, i: usize) -> (Coordinate, Coordinate) {
        let low = if i == 0 {
            NULL_COORDINATE
        } else {
            self.cuts[i - 1]
        };
        let high = self.cuts.get(i).map_or(u64::MAX, |c| c - 1);
        (low, high)
    }
}

/// How many intervals each of `d` dimensions gets so that the grid has as close to
/// `n_regions` regions as possible without going over: about `N^(1/d)` each, the first
/// dimensions one more where that still fits. At least one interval each.
pub fn intervals_per_dimension(n_regions: u32, d: usize) -> Vec<usize> {
    if d == 0 {
        return vec![];
    }
    let n = u64::from(n_regions.max(1));
    // The largest k with k^d <= n, found exactly (no float rounding at the edges).
    let mut k = (n as f64).powf(1.0 / d as f64).floor().max(1.0) as u64;
    while k > 1 && k.checked_pow(d as u32).is_none_or(|p| p > n) {
        k -= 1;
    }
    while (k + 1).checked_pow(d as u32).is_some_and(|p| p <= n) {
        k += 1;
    }
    let mut per = vec![k; d];
    let mut product = k.pow(d as u32);
    for slot in per.iter_mut() {
        let bigger = product / *slot * (*slot + 1);
        if bigger > n {
            break;
        }
        product = bigger;
        *slot += 1;
    }
    per.into_iter().map(|k| k as usize).collect()
}

/// Cut points for `k` intervals of an axis with no data to sample: even cuts of a hashed
/// axis; on an ordered axis one cut at 1 (NULLs, negatives and zero below it) and the
/// rest at powers of two spaced evenly in the exponent up to 2^53, where integers stop
/// being exact in a double.
pub fn default_cuts(kind: AxisKind, k: usize) -> Vec<Coordinate> {
    if k <= 1 {
        return vec![];
    }
    let mut cuts: Vec<Coordinate> = match kind {
        AxisKind::Hashed => {
            let step = u64::MAX / k as u64;
            (1..k as u64).map(|i| i * step).collect()
        }
        AxisKind::Ordered => (0..k - 1)
            .map(|j| {
                let exponent = if k == 2 {
                    0.0
                } else {
                    53.0 * j as f64 / (k - 2) as f64
                };
                ordered(exponent.exp2())
            })
            .collect(),
    };
    cuts.dedup();
    cuts
}

/// Cut points for at most `k` intervals from a sample of coordinates on one axis: the
/// sample's `k`-quantiles, each cut the first coordinate of its interval. Repeated values
/// never straddle a cut, so a value that fills more than one quantile makes fewer
/// intervals rather than empty ones. The sample is sorted in place.
pub fn cuts_from_sample(sample: &mut [Coordinate], k: usize) -> Vec<Coordinate> {
    sample.sort_unstable();
    let mut cuts: Vec<Coordinate> = Vec::with_capacity(k.saturating_sub(1));
    if sample.is_empty() {
        return cuts;
    }
    for j in 1..k {
        let q = sample[j * sample.len() / k];
        // A cut at the smallest sampled value would leave the interval below it empty.
        if q > NULL_COORDINATE && q > sample[0] && cuts.last().is_none_or(|&last| q > last) {
            cuts.push(q);
        }
    }
    cuts
}

/// A subspace: a named set of attributes whose hyperspace is cut into a grid of regions
/// (HyperDex §3). The key subspace is not one of these: it is the table's own tablets.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Subspace {
    /// The subspace's name, unique within its table (by default the attribute names
    /// joined with `_`).
    pub name: String,
    /// The regions asked for (`N`); the grid has at most this many.
    pub target_regions: u32,
    /// The axes and their cuts, in the order the subspace was declared.
    pub dimensions: Vec<Dimension>,
}

impl Subspace {
    /// A subspace over `axes` with about `target_regions` regions and default cuts (for a
    /// table with no rows yet).
    pub fn new(name: impl Into<String>, axes: Vec<Axis>, target_regions: u32) -> Result<Self> {
        Self::build(name.into(), axes, target_regions, None)
    }

    /// A subspace over `axes` whose cuts are the quantiles of `sample`: rows of values
    /// for the axes, in axis order (a uniform sample of the table it is built over). An
    /// empty sample gives the default cuts.
    pub fn from_sample(
        name: impl Into<String>,
        axes: Vec<Axis>,
        target_regions: u32,
        sample: &[Vec<Value>],
    ) -> Result<Self> {
        Self::build(name.into(), axes, target_regions, Some(sample))
    }

    fn build(
        name: String,
        axes: Vec<Axis>,
        target_regions: u32,
        sample: Option<&[Vec<Value>]>,
    ) -> Result<Self> {
        if axes.is_empty() {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "subspace '{name}' has no attributes: name at least one column"
            )));
        }
        if axes.len() > MAX_DIMENSIONS {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "subspace '{name}' has {} attributes, more than {MAX_DIMENSIONS}: split it into \
                 smaller subspaces (each search uses the one that fits it best)",
                axes.len()
            )));
        }
        for (i, a) in axes.iter().enumerate() {
            if axes[..i].iter().any(|b| b.column == a.column) {
                return Err(HyperspaceError::InvalidSubspace(format!(
                    "subspace '{name}' names column '{}' twice",
                    a.column
                )));
            }
        }
        if target_regions == 0 || target_regions > MAX_REGIONS {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "subspace '{name}' asks for {target_regions} regions: choose between 1 and \
                 {MAX_REGIONS}"
            )));
        }
        let per = intervals_per_dimension(target_regions, axes.len());
        let sample = sample.filter(|s| !s.is_empty());
        let mut dimensions = Vec::with_capacity(axes.len());
        for (d, (axis, k)) in axes.into_iter().zip(per).enumerate() {
            let cuts = match sample {
                None => default_cuts(axis.kind, k),
                Some(rows) => {
                    let mut coords = rows
                        .iter()
                        .map(|row| {
                            let v = row.get(d).ok_or_else(|| {
                                HyperspaceError::InvalidSubspace(format!(
                                    "a sample row has {} values, the subspace has more axes",
                                    row.len()
                                ))
                            })?;
                            axis.coordinate(v)
                        })
                        .collect::<Result<Vec<_>>>()?;
                    cuts_from_sample(&mut coords, k)
                }
            };
            dimensions.push(Dimension {
                axis,
                cuts: cuts.into(),
            });
        }
        Ok(Subspace {
            name,
            target_regions,
            dimensions,
        })
    }

    /// The axes for `columns` of `schema`, in order.
    pub fn axes_of(schema: &Schema, columns: &[impl AsRef<str>]) -> Result<Vec<Axis>> {
        columns
            .iter()
            .map(|c| {
                let i = schema.index_of(c.as_ref())?;
                let col = schema.column(i);
                Ok(Axis::new(col.name.clone(), col.data_type.clone()))
            })
            .collect()
    }

    /// The attribute names, in axis order.
    pub fn columns(&self) -> Vec<&str> {
        self.dimensions
            .iter()
            .map(|d| d.axis.column.as_str())
            .collect()
    }

    /// How many regions the grid has (the product of the dimensions' intervals).
    pub fn region_count(&self) -> u32 {
        self.dimensions
            .iter()
            .map(|d| d.intervals() as u32)
            .product()
    }

    /// The region with the given interval on each dimension.
    ///
    /// REQUIRES: one interval per dimension, each below that dimension's count.
    pub fn region_of_intervals(&self, intervals: &[usize]) -> RegionId {
        debug_assert_eq!(intervals.len(), self.dimensions.len());
        let mut id = 0u32;
        for (d, &i) in self.dimensions.iter().zip(intervals) {
            debug_assert!(i < d.intervals());
            id = id * d.intervals() as u32 + i as u32;
        }
        id
    }

    /// The interval on each dimension of region `region`.
    pub fn intervals_of_region(&self, region: RegionId) -> Result<Vec<usize>> {
        let regions = self.region_count();
        if region >= regions {
            return Err(HyperspaceError::NoSuchRegion { region, regions });
        }
        let mut rest = region;
        let mut out = vec![0; self.dimensions.len()];
        for (d, slot) in self.dimensions.iter().zip(out.iter_mut()).rev() {
            let n = d.intervals() as u32;
            *slot = (rest % n) as usize;
            rest /= n;
        }
        Ok(out)
    }

    /// The region that holds an object whose subspace attributes have `values` (in
    /// axis order).
    pub fn region_of_values(&self, values: &[&Value]) -> Result<RegionId> {
        if values.len() != self.dimensions.len() {
            return Err(HyperspaceError::InvalidSubspace(format!(
                "subspace '{}' has {} attributes, got {} values",
                self.name,
                self.dimensions.len(),
                values.len()
            )));
        }
        let mut intervals = Vec::with_capacity(values.len());
        for (d, v) in self.dimensions.iter().zip(values) {
            intervals.push(d.interval_of(d.axis.coordinate(v)?));
        }
        Ok(self.region_of_intervals(&intervals))
    }

    /// The region that holds `row`, a full row of `schema`.
    pub fn region_of_row(&self, schema: &Schema, row: &[Value]) -> Result<RegionId> {
        self.region_of_values(&self.axis_values(schema, row)?)
    }

    /// Where `row`, a full row of `schema`, lies in this subspace: its region and its
    /// [`Cell`] within the region.
    pub fn place_of_row(&self, schema: &Schema, row: &[Value]) -> Result<Place> {
        let values = self.axis_values(schema, row)?;
        let region = self.region_of_values(&values)?;
        let first = self.dimensions[0].axis.coordinate(values[0])?;
        Ok((region, cell_of(first)))
    }

    /// The values of `row` (a full row of `schema`) on the subspace's axes, in axis
    /// order.
    fn axis_values<'r>(&self, schema: &Schema, row: &'r [Value]) -> Result<Vec<&'r Value>> {
        let mut values = Vec::with_capacity(self.dimensions.len());
        for d in &self.dimensions {
            let i = schema.index_of(&d.axis.column)?;
            let v = row.get(i).ok_or_else(|| {
                HyperspaceError::InvalidSubspace(format!(
                    "a row of {} values has no column '{}' (position {i})",
                    row.len(),
                    d.axis.column
                ))
            })?;
            values.push(v);
        }
        Ok(values)
    }

    /// A readable description of a region's box, e.g. `a#2/4, b#0/4` (interval `2` of
    /// `4` on `a`). Used by `describe` and the web page.
    pub fn describe_region(&self, region: RegionId) -> Result<String> {
        let intervals = self.intervals_of_region(region)?;
        Ok(self
            .dimensions
            .iter()
            .zip(intervals)
            .map(|(d, i)| format!("{}#{i}/{}", d.axis.column, d.intervals()))
            .collect::<Vec<_>>()
            .join(", "))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use cairn_common::DataType;
    use proptest::prelude::*;

    fn int_axis(name: &str) -> Axis {
        Axis::new(name, DataType::Int64)
    }

    proptest! {
        #[test]
        fn grid_size_is_about_the_dth_root(n in 1u32..=MAX_REGIONS, d in 1usize..=MAX_DIMENSIONS) {
            let per = intervals_per_dimension(n, d);
            prop_assert_eq!(per.len(), d);
            let product: u64 = per.iter().map(|&k| k as u64).product();
            prop_assert!(product >= 1 && product <= u64::from(n));
            let root = f64::from(n).powf(1.0 / d as f64);
            for &k in &per {
                prop_assert!(k >= 1);
                prop_assert!((k as f64) <= root.ceil() + 1e-9, "{k} intervals for root {root}");
                prop_assert!((k as f64) >= root.floor() - 1e-9 || k == 1);
            }
            // The grid stays balanced (no two dimensions differ by more than one
            // interval), and none of the smaller dimensions could grow without going
            // over N.
            let smallest = *per.iter().min().unwrap();
            prop_assert!(per.iter().all(|&k| k <= smallest + 1));
            prop_assert!(product / smallest as u64 * (smallest as u64 + 1) > u64::from(n));
        }

        #[test]
        fn sample_cuts_are_increasing_and_balanced(
            mut sample in proptest::collection::vec(1u64..u64::MAX, 0..600),
            k in 1usize..40,
        ) {
            let mut distinct = sample.clone();
            distinct.sort_unstable();
            distinct.dedup();
            let all_distinct = distinct.len() == sample.len();
            let cuts = cuts_from_sample(&mut sample, k);
            prop_assert!(cuts.len() < k.max(1));
            prop_assert!(cuts.windows(2).all(|w| w[0] < w[1]));
            prop_assert!(cuts.iter().all(|&c| c > NULL_COORDINATE));
            let dim = Dimension {
                axis: int_axis("a"),
                cuts: cuts.into(),
            };
            let mut counts = vec![0usize; dim.intervals()];
            for &c in &sample {
                counts[dim.interval_of(c)] += 1;
            }
            if all_distinct && sample.len() >= k {
                let fair = sample.len().div_ceil(k);
                for &n in &counts {
                    prop_assert!(n <= fair + 1, "interval of {n} rows, fair share {fair}");
                }
                prop_assert_eq!(dim.intervals(), k);
            }
        }

        #[test]
        fn intervals_between_covers_exactly(
            mut cuts in proptest::collection::vec(1u64..1000, 0..10),
            lo in 0u64..1100,
            hi in 0u64..1100,
            probe in 0u64..1100,
        ) {
            cuts.sort_unstable();
            cuts.dedup();
            let dim = Dimension {
                axis: int_axis("a"),
                cuts: cuts.into(),
            };
            let range = dim.intervals_between(lo, hi);
            let i = dim.interval_of(probe);
            if lo <= probe && probe <= hi {
                prop_assert!(range.contains(&i));
            }
            for j in range {
                let (b_lo, b_hi) = dim.bounds(j);
                prop_assert!(b_lo <= hi && lo <= b_hi, "interval {j} misses {lo}..={hi}");
            }
            let (b_lo, b_hi) = dim.bounds(i);
            prop_assert!(b_lo <= probe && probe <= b_hi);
        }

        #[test]
        fn region_ids_round_trip(n in 1u32..5000, d in 1usize..5, seed: u64) {
            let axes = (0..d).map(|i| int_axis(&format!("c{i}"))).collect();
            let s = Subspace::new("s", axes, n).unwrap();
            let count = s.region_count();
            prop_assert!(count >= 1 && count <= n);
            let r = (seed % u64::from(count)) as RegionId;
            let intervals = s.intervals_of_region(r).unwrap();
            prop_assert_eq!(s.region_of_intervals(&intervals), r);
            prop_assert!(s.intervals_of_region(count).is_err());
        }
    }

    #[test]
    fn default_ordered_cuts_split_small_and_large_numbers() {
        let s = Subspace::new("s", vec![int_axis("a")], 8).unwrap();
        assert_eq!(s.region_count(), 8);
        let r = |v: i64| s.region_of_values(&[&Value::Int64(v)]).unwrap();
        assert_eq!(r(-5), 0);
        assert_eq!(r(0), 0);
        assert_eq!(s.region_of_values(&[&Value::Null]).unwrap(), 0);
        assert!(r(1) >= 1);
        assert!(r(1_000) < r(1_000_000_000));
        assert!(r(1_000_000_000) < r(1_700_000_000_000_000));
    }

    #[test]
    fn a_sample_balances_skewed_values() {
        // 1,000 values crowded into 0..1000: the default grid puts them in two regions,
        // the sampled one spreads them over all eight.
        let rows: Vec<Vec<Value>> = (0..1000).map(|v| vec![Value::Int64(v)]).collect();
        let s = Subspace::from_sample("s", vec![int_axis("a")], 8, &rows).unwrap();
        let mut counts = vec![0; s.region_count() as usize];
        for row in &rows {
            counts[s.region_of_values(&[&row[0]]).unwrap() as usize] += 1;
        }
        assert_eq!(counts, vec![125; 8]);
    }

    #[test]
    fn low_cardinality_samples_give_fewer_intervals() {
        let rows: Vec<Vec<Value>> = (0..100)
            .map(|v| vec![Value::String(["x", "y"][v % 2].into())])
            .collect();
        let axes = vec![Axis::new("tag", DataType::String)];
        let s = Subspace::from_sample("s", axes, 16, &rows).unwrap();
        assert!(s.region_count() <= 3, "{}", s.region_count());
    }

    #[test]
    fn bad_definitions_are_refused() {
        assert!(Subspace::new("s", vec![], 4).is_err());
        assert!(Subspace::new("s", vec![int_axis("a"), int_axis("a")], 4).is_err());
        assert!(Subspace::new("s", vec![int_axis("a")], 0).is_err());
        let e = Subspace::new("s", vec![int_axis("a")], MAX_REGIONS + 1).unwrap_err();
        assert!(e.to_string().contains("choose between 1 and"), "{e}");
    }

    /// A table `(k BIGINT PRIMARY KEY, a BIGINT NULL, b TEXT NULL)`.
    pub(crate) fn kab_schema() -> Schema {
        Schema::new(
            vec![
                cairn_common::ColumnSpec::new("k", DataType::Int64),
                cairn_common::ColumnSpec::new("a", DataType::Int64).nullable(),
                cairn_common::ColumnSpec::new("b", DataType::String).nullable(),
            ],
            &["k"],
        )
        .unwrap()
    }

    #[test]
    fn rows_locate_by_column_name() {
        let schema = kab_schema();
        let axes = Subspace::axes_of(&schema, &["b", "a"]).unwrap();
        assert_eq!(axes[0].kind, AxisKind::Hashed);
        let s = Subspace::new("ab", axes, 16).unwrap();
        let row = vec![
            Value::Int64(1),
            Value::Int64(7),
            Value::String("hello".into()),
        ];
        let want = s
            .region_of_values(&[&Value::String("hello".into()), &Value::Int64(7)])
            .unwrap();
        assert_eq!(s.region_of_row(&schema, &row).unwrap(), want);
        assert!(Subspace::axes_of(&schema, &["nope"]).is_err());
        assert!(s.describe_region(want).unwrap().starts_with("b#"));
    }
}
