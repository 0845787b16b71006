//! Partition schemas: zero or more hash levels, then an optional range (Kudu paper §2.2).
//!
//! A row's **partition key** is one 4-byte big-endian bucket number per hash level,
//! followed by the order-preserving encoding ([`crate::key`]) of its range columns. Each
//! tablet owns one [`Partition`]: a bucket per hash level and a `[lower, upper)` interval
//! of encoded range keys (empty bytes = unbounded).
//!
//! **The hash** (fixed forever, since data placement depends on it): for a hash level
//! over columns `c1..cn` with seed `s` and `b` buckets, encode the row's values of
//! `c1..cn` with the primary-key encoding (the last one unescaped), compute XXH64 of those
//! bytes with seed `s`, and take it modulo `b`.

use std::collections::HashSet;

use crate::error::{CommonError, Result};
use crate::key;
use crate::predicate::{ColumnPredicate, PredicateOp, simplify_conjunction};
use crate::schema::Schema;
use crate::types::Value;

/// One level of hash partitioning.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct HashLevel {
    /// Columns hashed together (must be primary-key columns).
    pub columns: Vec<String>,
    /// Number of buckets (≥ 2).
    pub num_buckets: u32,
    /// Hash seed.
    pub seed: u32,
}

/// How a table is split into tablets.
#[derive(Clone, Debug, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub struct PartitionSchema {
    /// Hash levels, outermost first.
    pub hash_levels: Vec<HashLevel>,
    /// Range-partition columns (primary-key columns), possibly none.
    pub range_columns: Vec<String>,
}

/// Which colocation group a new table joins: tables hashed on one level alike (same
/// column types, bucket count, seed and replicas) whose bucket *i* the master keeps
/// on the same servers, so joins and aggregations on the hash columns stay local.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Colocation {
    /// The group of the tables hashed alike, when the table can be colocated (one hash
    /// level, no range partitioning); none otherwise.
    #[default]
    Default,
    /// No group: the tablets are spread by load alone.
    None,
    /// The named table's group; creating the table fails if the two are not hashed
    /// alike.
    With(String),
}

/// The slice of the partition-key space one tablet owns.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Partition {
    /// Bucket per hash level.
    pub hash_buckets: Vec<u32>,
    /// Inclusive lower bound of encoded range keys (empty: unbounded).
    pub range_lower: Vec<u8>,
    /// Exclusive upper bound of encoded range keys (empty: unbounded).
    pub range_upper: Vec<u8>,
}

impl Partition {
    /// Whether a partition key (as built by [`PartitionSchema::partition_key`]) falls in
    /// this partition.
    pub fn contains(&self, partition_key: &[u8]) -> bool {
        let n = self.hash_buckets.len() * 4;
        if partition_key.len() < n {
            return false;
        }
        for (i, b) in self.hash_buckets.iter().enumerate() {
            if partition_key[i * 4..i * 4 + 4] != b.to_be_bytes() {
                return false;
            }
        }
        let r = &partition_key[n..];
        r >= self.range_lower.as_slice()
            && (self.range_upper.is_empty() || r < self.range_upper.as_slice())
    }
}

impl PartitionSchema {
    /// Checks the partition schema against a table schema.
    pub fn validate(&self, schema: &Schema) -> Result<()> {
        let mut seen = HashSet::new();
        for (li, level) in self.hash_levels.iter().enumerate() {
            if level.columns.is_empty() {
                return Err(CommonError::InvalidPartitioning(format!(
                    "hash level {li} has no columns"
                )));
            }
            if level.num_buckets < 2 {
                return Err(CommonError::InvalidPartitioning(format!(
                    "hash level {li} has {} buckets; use at least 2",
                    level.num_buckets
                )));
            }
            for c in &level.columns {
                self.check_key_column(schema, c)?;
                if !seen.insert(c.clone()) {
                    return Err(CommonError::InvalidPartitioning(format!(
                        "column '{c}' appears in more than one hash level"
                    )));
                }
            }
        }
        for c in &self.range_columns {
            self.check_key_column(schema, c)?;
        }
        Ok(())
    }

    fn check_key_column(&self, schema: &Schema, c: &str) -> Result<()> {
        let i = schema.index_of(c)?;
        if !schema.is_key_column(i) {
            return Err(CommonError::InvalidPartitioning(format!(
                "partition column '{c}' must be part of the primary key"
            )));
        }
        Ok(())
    }

    fn column_indexes(schema: &Schema, cols: &[String]) -> Result<Vec<usize>> {
        cols.iter().map(|c| schema.index_of(c)).collect()
    }

    /// The bucket of a row (full row, schema order) for hash level `level`.
    pub fn hash_bucket(&self, schema: &Schema, level: usize, row: &[Value]) -> Result<u32> {
        let l = &self.hash_levels[level];
        let idx = Self::column_indexes(schema, &l.columns)?;
        let vals: Vec<&Value> = idx.iter().map(|&i| &row[i]).collect();
        Ok(bucket_of(&key::encode_values(&vals)?, l))
    }

    /// Encodes the range-column values (in range-column order) into a range key.
    pub fn encode_range_key(&self, values: &[Value]) -> Result<Vec<u8>> {
        let refs: Vec<&Value> = values.iter().collect();
        key::encode_values(&refs)
    }

    /// The partition key of a full row.
    pub fn partition_key(&self, schema: &Schema, row: &[Value]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(self.hash_levels.len() * 4 + 16);
        for l in 0..self.hash_levels.len() {
            out.extend_from_slice(&self.hash_bucket(schema, l, row)?.to_be_bytes());
        }
        let idx = Self::column_indexes(schema, &self.range_columns)?;
        let vals: Vec<&Value> = idx.iter().map(|&i| &row[i]).collect();
        out.extend_from_slice(&key::encode_values(&vals)?);
        Ok(out)
    }

    /// All partitions: the cartesian product of hash buckets with the given range
    /// partitions (`(lower, upper)` encoded range keys, empty = unbounded). With no range
    /// bounds given there is one unbounded range.
    pub fn create_partitions(&self, range_bounds: &[(Vec<u8>, Vec<u8>)]) -> Result<Vec<Partition>> {
        let mut ranges = range_bounds.to_vec();
        if ranges.is_empty() {
            ranges.push((vec![], vec![]));
        }
        ranges.sort();
        for w in ranges.windows(2) {
            if w[0].1.is_empty() || w[0].1 > w[1].0 {
                return Err(CommonError::InvalidPartitioning(
                    "range partitions overlap".into(),
                ));
            }
        }
        for (lo, hi) in &ranges {
            if !hi.is_empty() && lo >= hi {
                return Err(CommonError::InvalidPartitioning(
                    "a range partition's lower bound must be below its upper bound".into(),
                ));
            }
        }
        let mut bucket_combos: Vec<Vec<u32>> = vec![vec![]];
        for l in &self.hash_levels {
            bucket_combos = bucket_combos
                .into_iter()
                .flat_map(|prefix| {
                    (0..l.num_buckets).map(move |b| {
                        let mut p = prefix.clone();
                        p.push(b);
                        p
                    })
                })
                .collect();
        }
        let mut out = Vec::new();
        for buckets in &bucket_combos {
            for (lo, hi) in &ranges {
                out.push(Partition {
                    hash_buckets: buckets.clone(),
                    range_lower: lo.clone(),
                    range_upper: hi.clone(),
                });
            }
        }
        Ok(out)
    }

    /// Indexes of the partitions that may hold rows matching the conjunction `preds`.
    pub fn prune(
        &self,
        schema: &Schema,
        partitions: &[Partition],
        preds: &[ColumnPredicate],
    ) -> Result<Vec<usize>> {
        for p in preds {
            p.validate(schema)?;
        }
        let preds = simplify_conjunction(preds);
        if preds.iter().any(|p| p.op == PredicateOp::None) {
            return Ok(vec![]);
        }
        let find = |c: &str| preds.iter().find(|p| p.column == c);
        // Hash levels: the set of possible buckets when every column is pinned.
        let mut allowed: Vec<Option<HashSet<u32>>> = Vec::new();
        for l in &self.hash_levels {
            let mut combos: Vec<Vec<Value>> = vec![vec![]];
            let mut pinned = true;
            for c in &l.columns {
                let vals = match find(c).map(|p| &p.op) {
                    Some(PredicateOp::Equality(v)) => vec![v.clone()],
                    Some(PredicateOp::InList(vs)) => vs.clone(),
                    _ => {
                        pinned = false;
                        break;
                    }
                };
                combos = combos
                    .into_iter()
                    .flat_map(|p| {
                        vals.iter().map(move |v| {
                            let mut p = p.clone();
                            p.push(v.clone());
                            p
                        })
                    })
                    .collect();
                if combos.len() > 4096 {
                    pinned = false;
                    break;
                }
            }
            allowed.push(if pinned {
                let mut set = HashSet::new();
                for combo in combos {
                    let refs: Vec<&Value> = combo.iter().collect();
                    set.insert(bucket_of(&key::encode_values(&refs)?, l));
                }
                Some(set)
            } else {
                None
            });
        }
        // Range: bounds implied by the predicate on the first range column.
        let (lower, upper_excl) = match self.range_columns.first().and_then(|c| find(c)) {
            Some(p) => self.range_bounds_for(p)?,
            None => (vec![], None),
        };
        Ok(partitions
            .iter()
            .enumerate()
            .filter(|(_, part)| {
                let hash_ok = allowed
                    .iter()
                    .zip(&part.hash_buckets)
                    .all(|(set, b)| set.as_ref().is_none_or(|s| s.contains(b)));
                let lower_ok = part.range_upper.is_empty() || lower < part.range_upper;
                let upper_ok = match &upper_excl {
                    None => true,
                    Some(u) => *u > part.range_lower,
                };
                hash_ok && lower_ok && upper_ok
            })
            .map(|(i, _)| i)
            .collect())
    }

    /// Conservative `[lower, upper)` bounds (encoded range keys) for rows satisfying `p`
    /// on the first range column; `None` upper = unbounded.
    fn range_bounds_for(&self, p: &ColumnPredicate) -> Result<(Vec<u8>, Option<Vec<u8>>)> {
        let single = self.range_columns.len() == 1;
        let enc = |v: &Value| -> Result<Vec<u8>> {
            let mut out = Vec::new();
            key::encode_value(v, single, &mut out)?;
            Ok(out)
        };
        // Exclusive upper bound just above every key whose first column is <= v.
        let above = |v: &Value| -> Result<Option<Vec<u8>>> {
            let mut e = enc(v)?;
            if single {
                e.push(0);
                Ok(Some(e))
            } else {
                Ok(prefix_successor(e))
            }
        };
        // (value, inclusive) bounds on the first range column.
        let (lo, hi): (Option<&Value>, Option<(&Value, bool)>) = match &p.op {
            PredicateOp::Equality(v) => (Some(v), Some((v, true))),
            PredicateOp::Range { lower, upper } => (
                lower.as_ref().map(|x| &x.0),
                upper.as_ref().map(|x| (&x.0, x.1)),
            ),
            PredicateOp::InList(vs) => {
                let min = vs
                    .iter()
                    .min_by(|a, b| a.partial_cmp_same(b).unwrap_or(std::cmp::Ordering::Equal));
                let max = vs
                    .iter()
                    .max_by(|a, b| a.partial_cmp_same(b).unwrap_or(std::cmp::Ordering::Equal));
                (min, max.map(|m| (m, true)))
            }
            _ => (None, None),
        };
        let lower = match lo {
            Some(v) => enc(v)?,
            None => vec![],
        };
        let upper = match hi {
            // With a single range column, `col < v` is exactly `key < enc(v)`.
            Some((v, false)) if single => Some(enc(v)?),
            Some((v, _)) => above(v)?,
            None => None,
        };
        Ok((lower, upper))
    }
}

fn bucket_of(encoded: &[u8], level: &HashLevel) -> u32 {
    (xxhash_rust::xxh64::xxh64(encoded, level.seed as u64) % level.num_buckets as u64) as u32
}

/// The smallest byte string greater than every string with prefix `b`, or `None` if
/// there is none (all bytes 0xFF).
pub fn prefix_successor(mut b: Vec<u8>) -> Option<Vec<u8>> {
    while let Some(last) = b.pop() {
        if last != 0xFF {
            b.push(last + 1);
            return Some(b);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::ColumnSpec;
    use crate::types::DataType;

    fn schema() -> Schema {
        Schema::new(
            vec![
                ColumnSpec::new("host", DataType::String),
                ColumnSpec::new("ts", DataType::Int64),
                ColumnSpec::new("v", DataType::Double).nullable(),
            ],
            &["host", "ts"],
        )
        .unwrap()
    }

    fn pschema() -> PartitionSchema {
        PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["host".into()],
                num_buckets: 4,
                seed: 0,
            }],
            range_columns: vec!["ts".into()],
        }
    }

    fn row(h: &str, ts: i64) -> Vec<Value> {
        vec![Value::String(h.into()), Value::Int64(ts), Value::Null]
    }

    #[test]
    fn every_row_lands_in_exactly_one_partition_and_pruning_keeps_it() {
        let s = schema();
        let ps = pschema();
        ps.validate(&s).unwrap();
        let bounds: Vec<(Vec<u8>, Vec<u8>)> =
            [(None, Some(100)), (Some(100), Some(200)), (Some(200), None)]
                .iter()
                .map(|(lo, hi): &(Option<i64>, Option<i64>)| {
                    let e = |x: &Option<i64>| {
                        x.map(|v| ps.encode_range_key(&[Value::Int64(v)]).unwrap())
                            .unwrap_or_default()
                    };
                    (e(lo), e(hi))
                })
                .collect();
        let parts = ps.create_partitions(&bounds).unwrap();
        assert_eq!(parts.len(), 12);
        for h in ["a", "b", "c", "d", "e"] {
            for ts in [-5, 0, 99, 100, 150, 199, 200, 10_000] {
                let r = row(h, ts);
                let pk = ps.partition_key(&s, &r).unwrap();
                let owners: Vec<usize> = (0..parts.len())
                    .filter(|&i| parts[i].contains(&pk))
                    .collect();
                assert_eq!(owners.len(), 1);
                let preds = vec![
                    ColumnPredicate::eq("host", r[0].clone()),
                    ColumnPredicate::eq("ts", r[1].clone()),
                ];
                let kept = ps.prune(&s, &parts, &preds).unwrap();
                assert_eq!(kept, owners, "exact predicates prune to the owner");
                let kept = ps
                    .prune(
                        &s,
                        &parts,
                        &[ColumnPredicate::range(
                            "ts",
                            Value::Int64(ts),
                            Value::Int64(ts + 1),
                        )],
                    )
                    .unwrap();
                assert!(kept.contains(&owners[0]));
                assert_eq!(kept.len(), 4, "one range partition per bucket");
            }
        }
        assert_eq!(ps.prune(&s, &parts, &[]).unwrap().len(), 12);
    }

    #[test]
    fn rejects_bad_partition_schemas() {
        let s = schema();
        let bad = PartitionSchema {
            hash_levels: vec![],
            range_columns: vec!["v".into()],
        };
        assert!(bad.validate(&s).is_err());
        let bad = PartitionSchema {
            hash_levels: vec![HashLevel {
                columns: vec!["host".into()],
                num_buckets: 1,
                seed: 0,
            }],
            range_columns: vec![],
        };
        assert!(bad.validate(&s).is_err());
    }
}
