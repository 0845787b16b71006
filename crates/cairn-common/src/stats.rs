//! Column statistics for query planning.

use std::cmp::Ordering;

use crate::types::Value;

/// What a tablet knows of one column's stored values, for a query planner's estimates
/// (join order, build side). Never exact: rows still in memory, and updates and deletes
/// not yet compacted into the base data, are not reflected.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ColumnStatistics {
    /// The column's name.
    pub column: String,
    /// Smallest non-null value seen (`None`: unknown).
    pub min: Option<Value>,
    /// Largest non-null value seen (`None`: unknown).
    pub max: Option<Value>,
    /// NULLs counted.
    pub null_count: u64,
    /// About how many bytes the column takes in memory (as Arrow arrays).
    pub bytes: u64,
}

impl ColumnStatistics {
    /// Folds `other` (statistics of more rows of the same column) into `self`.
    pub fn merge(&mut self, other: &ColumnStatistics) {
        self.min = pick(self.min.take(), other.min.clone(), Ordering::Less);
        self.max = pick(self.max.take(), other.max.clone(), Ordering::Greater);
        self.null_count += other.null_count;
        self.bytes += other.bytes;
    }
}

/// The one of `a` and `b` that compares as `want` against the other; unknown (`None`)
/// when either is unknown or they cannot be compared.
fn pick(a: Option<Value>, b: Option<Value>, want: Ordering) -> Option<Value> {
    let (a, b) = (a?, b?);
    match a.partial_cmp_same(&b)? {
        o if o == want => Some(a),
        _ => Some(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_extremes_and_sums_counts() {
        let mut a = ColumnStatistics {
            column: "k".into(),
            min: Some(Value::Int64(5)),
            max: Some(Value::Int64(9)),
            null_count: 1,
            bytes: 10,
        };
        a.merge(&ColumnStatistics {
            column: "k".into(),
            min: Some(Value::Int64(2)),
            max: Some(Value::Int64(7)),
            null_count: 2,
            bytes: 5,
        });
        assert_eq!(a.min, Some(Value::Int64(2)));
        assert_eq!(a.max, Some(Value::Int64(9)));
        assert_eq!((a.null_count, a.bytes), (3, 15));
        a.merge(&ColumnStatistics {
            column: "k".into(),
            ..Default::default()
        });
        assert_eq!((a.min, a.max), (None, None), "unknown stays unknown");
    }
}
