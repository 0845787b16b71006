//! A randomized model of value-dependent chaining: a point leader starts puts and deletes
//! on a few objects without waiting for earlier chains, links are delivered to regions
//! in random order, retransmitted, and resent from the start after point-leader
//! failovers. Regions follow [`admit`]. After every step the model checks what a search
//! may see; when everything has been delivered, it checks that every subspace holds
//! exactly the objects of the key subspace, each once, in the region its value selects.

use std::collections::HashMap;

use cairn_common::{ColumnSpec, DataType, Schema, Value};
use cairn_hyperspace::{
    Admission, Axis, Cell, KeyChains, LinkAction, LinkMessage, Place, Subspace, Version, admit,
    build_chain,
};
use proptest::prelude::*;

const KEYS: u16 = 4;

fn schema() -> Schema {
    Schema::new(
        vec![
            ColumnSpec::new("k", DataType::Int64),
            ColumnSpec::new("a", DataType::Int64).nullable(),
            ColumnSpec::new("b", DataType::String).nullable(),
            ColumnSpec::new("c", DataType::Int64).nullable(),
        ],
        &["k"],
    )
    .unwrap()
}

fn subspaces() -> Vec<Subspace> {
    vec![
        Subspace::new("a", vec![Axis::new("a", DataType::Int64)], 4).unwrap(),
        Subspace::new(
            "bc",
            vec![
                Axis::new("b", DataType::String),
                Axis::new("c", DataType::Int64),
            ],
            6,
        )
        .unwrap(),
    ]
}

/// A row for key `k` whose attribute values come from `seed`, chosen so that values
/// fall in different regions and objects move often.
fn row(k: i64, seed: u16) -> Vec<Value> {
    let ints = [
        Value::Null,
        Value::Int64(-1),
        Value::Int64(5),
        Value::Int64(1 << 30),
        Value::Int64(1 << 60),
    ];
    let strs = [
        Value::Null,
        Value::String("x".into()),
        Value::String("y".into()),
        Value::String("z".into()),
    ];
    let s = seed as usize;
    vec![
        Value::Int64(k),
        ints[s % 5].clone(),
        strs[(s / 5) % 4].clone(),
        ints[(s / 20) % 5].clone(),
    ]
}

/// A change travelling down its chain.
struct Update {
    key: i64,
    version: Version,
    value: Option<Vec<Value>>,
    messages: Vec<LinkMessage>,
    /// The next link to deliver.
    cursor: usize,
}

/// One object in one region: the version applied and the live row (None: tombstone).
type Copy = (Version, Option<Vec<Value>>);

struct Model {
    schema: Schema,
    subspaces: Vec<Subspace>,
    /// regions[subspace][region] → (cell, key) → copy.
    regions: Vec<Vec<HashMap<(Cell, i64), Copy>>>,
    /// The key subspace: the newest version of each object the point leader decided.
    objects: HashMap<i64, (Version, Option<Vec<Value>>)>,
    /// The newest acknowledged change of each object.
    acknowledged: HashMap<i64, (Version, Option<Vec<Value>>)>,
    chains: HashMap<i64, KeyChains>,
    updates: Vec<Update>,
    /// Every change by version: its key and new value (the point leader's log).
    log: HashMap<Version, (i64, Option<Vec<Value>>)>,
    /// Per (subspace, region, cell, key): the versions applied there, in order.
    applied: HashMap<(usize, u32, Cell, i64), Vec<Version>>,
    /// Links delivered before, for retransmission.
    delivered: Vec<(i64, LinkMessage)>,
    next_version: Version,
}

impl Model {
    fn new() -> Self {
        let subspaces = subspaces();
        let regions = subspaces
            .iter()
            .map(|s| vec![HashMap::new(); s.region_count() as usize])
            .collect();
        Model {
            schema: schema(),
            subspaces,
            regions,
            objects: HashMap::new(),
            acknowledged: HashMap::new(),
            chains: HashMap::new(),
            updates: vec![],
            log: HashMap::new(),
            applied: HashMap::new(),
            delivered: vec![],
            next_version: 1,
        }
    }

    /// The point leader decides a change and starts its chain.
    fn start(&mut self, key: i64, value: Option<Vec<Value>>) {
        let old = self.objects.get(&key).and_then(|(_, v)| v.clone());
        let links = build_chain(
            &self.subspaces,
            &self.schema,
            old.as_deref(),
            value.as_deref(),
        )
        .unwrap();
        let version = self.next_version;
        self.next_version += 1;
        self.objects.insert(key, (version, value.clone()));
        self.log.insert(version, (key, value.clone()));
        let messages = self.chains.entry(key).or_default().start(version, links);
        self.updates.push(Update {
            key,
            version,
            value,
            messages,
            cursor: 0,
        });
        if self.updates.last().unwrap().messages.is_empty() {
            self.finish(self.updates.len() - 1);
        }
    }

    /// Delivers the next link of update `i`. Returns whether it made progress.
    fn deliver(&mut self, i: usize) -> bool {
        let u = &self.updates[i];
        let m = u.messages[u.cursor];
        let region = &mut self.regions[m.link.subspace][m.link.region as usize];
        let applied = region.get(&(m.link.cell, u.key)).map(|c| c.0);
        let history = self
            .applied
            .entry((m.link.subspace, m.link.region, m.link.cell, u.key))
            .or_default();
        match admit(applied, m.version, m.after) {
            Admission::Wait => return false,
            Admission::Duplicate => {
                // Only a link really applied before is a duplicate: a newer change must
                // never make a region skip an older one.
                assert!(
                    history.contains(&m.version),
                    "{m:?} skipped at a region that applied {history:?}"
                );
            }
            Admission::Apply => {
                // Each region applies an object's changes once each, in version order.
                assert!(
                    history.last().is_none_or(|&last| last < m.version),
                    "{m:?} after {history:?}"
                );
                history.push(m.version);
                let live = match m.link.action {
                    LinkAction::Put => Some(u.value.clone().expect("a put carries a value")),
                    LinkAction::Remove => None,
                };
                region.insert((m.link.cell, u.key), (m.version, live));
            }
        }
        self.delivered.push((u.key, m));
        let u = &mut self.updates[i];
        u.cursor += 1;
        if u.cursor == u.messages.len() {
            self.finish(i);
        }
        true
    }

    fn finish(&mut self, i: usize) {
        let u = self.updates.swap_remove(i);
        let acked = self.chains.get_mut(&u.key).unwrap().complete(u.version);
        for v in acked {
            let value = self.log[&v].1.clone();
            let prev = self.acknowledged.insert(u.key, (v, value));
            assert!(
                prev.is_none_or(|(p, _)| p < v),
                "acknowledgements go in version order"
            );
        }
    }

    /// A link delivered before arrives again: it must be a duplicate.
    fn retransmit(&mut self, i: usize) {
        let (key, m) = self.delivered[i];
        let applied = self.regions[m.link.subspace][m.link.region as usize]
            .get(&(m.link.cell, key))
            .map(|c| c.0);
        assert_eq!(
            admit(applied, m.version, m.after),
            Admission::Duplicate,
            "{m:?} at {applied:?}"
        );
    }

    /// The point leader fails; its successor rebuilds every unacknowledged chain from the
    /// log and resends each from its first link.
    fn failover(&mut self) {
        let mut rebuilt: HashMap<i64, KeyChains> = HashMap::new();
        let mut resend: Vec<Update> = vec![];
        for (&key, chains) in &self.chains {
            let fresh = rebuilt.entry(key).or_default();
            for version in chains.unacknowledged() {
                let value = self.log[&version].1.clone();
                // The chain is rebuilt from the logged change: the old value is the one
                // the previous version left.
                let old = self.previous_value(key, version);
                let links = build_chain(
                    &self.subspaces,
                    &self.schema,
                    old.as_deref(),
                    value.as_deref(),
                )
                .unwrap();
                let messages = fresh.start(version, links);
                resend.push(Update {
                    key,
                    version,
                    value,
                    messages,
                    cursor: 0,
                });
            }
        }
        self.chains = rebuilt;
        self.updates = vec![];
        for u in resend {
            let empty = u.messages.is_empty();
            self.updates.push(u);
            if empty {
                self.finish(self.updates.len() - 1);
            }
        }
    }

    /// The value the change before `version` of `key` left (None: none, or deleted).
    fn previous_value(&self, key: i64, version: Version) -> Option<Vec<Value>> {
        (1..version)
            .rev()
            .find_map(|v| self.log.get(&v).filter(|(k, _)| *k == key))
            .and_then(|(_, value)| value.clone())
    }

    /// What a search may rely on at any instant.
    fn check_search_view(&self) {
        for (s, sub) in self.subspaces.iter().enumerate() {
            for (r, region) in self.regions[s].iter().enumerate() {
                for ((cell, key), (v, live)) in region {
                    let Some(row) = live else { continue };
                    // A live copy is never older than the object's acknowledged change.
                    let (acked, acked_value) =
                        self.acknowledged.get(key).cloned().unwrap_or((0, None));
                    assert!(
                        *v >= acked,
                        "subspace {s} region {r} holds key {key} at {v}, acknowledged {acked}"
                    );
                    if *v == acked {
                        assert_eq!(Some(row), acked_value.as_ref());
                    }
                    assert_eq!(
                        sub.place_of_row(&self.schema, row).unwrap(),
                        (r as u32, *cell)
                    );
                }
            }
        }
        // An acknowledged object is never missing from a subspace while every change of it
        // not yet acknowledged is a put (a delete applied but not yet acknowledged may
        // already have removed it).
        for (key, (acked, value)) in &self.acknowledged {
            if value.is_none() {
                continue;
            }
            let deleting = self.chains[key]
                .unacknowledged()
                .any(|v| self.log[&v].1.is_none());
            if deleting {
                continue;
            }
            for (s, regions) in self.regions.iter().enumerate() {
                let present = regions.iter().any(|region| {
                    region
                        .iter()
                        .any(|((_, k), (v, live))| k == key && live.is_some() && v >= acked)
                });
                assert!(
                    present,
                    "key {key} (acknowledged at {acked}) is missing from subspace {s}"
                );
            }
        }
    }

    /// After everything was delivered: each subspace is exactly the key subspace.
    fn check_converged(&self) {
        assert!(self.updates.is_empty());
        assert!(self.chains.values().all(KeyChains::is_idle));
        assert_eq!(self.acknowledged, self.objects);
        // Every link of every change was applied at its region, exactly once.
        let mut expected: HashMap<(usize, u32, Cell, i64), Vec<Version>> = HashMap::new();
        let mut versions: Vec<_> = self.log.keys().copied().collect();
        versions.sort_unstable();
        for v in versions {
            let (key, value) = &self.log[&v];
            let old = self.previous_value(*key, v);
            let links = build_chain(
                &self.subspaces,
                &self.schema,
                old.as_deref(),
                value.as_deref(),
            )
            .unwrap();
            for l in links {
                expected
                    .entry((l.subspace, l.region, l.cell, *key))
                    .or_default()
                    .push(v);
            }
        }
        let mut got = self.applied.clone();
        got.retain(|_, h| !h.is_empty());
        assert_eq!(got, expected);
        for (s, sub) in self.subspaces.iter().enumerate() {
            let mut seen: HashMap<i64, (Place, Version, Vec<Value>)> = HashMap::new();
            for (r, region) in self.regions[s].iter().enumerate() {
                for ((cell, key), (v, live)) in region {
                    if let Some(row) = live {
                        let twice = seen.insert(*key, ((r as u32, *cell), *v, row.clone()));
                        assert!(twice.is_none(), "key {key} twice in subspace {s}");
                    }
                }
            }
            for (key, (v, value)) in &self.objects {
                match value {
                    None => assert!(!seen.contains_key(key), "deleted key {key} in subspace {s}"),
                    Some(row) => {
                        let (place, got_v, got) = seen
                            .remove(key)
                            .unwrap_or_else(|| panic!("key {key} missing from subspace {s}"));
                        assert_eq!((got_v, &got), (*v, row));
                        assert_eq!(sub.place_of_row(&self.schema, row).unwrap(), place);
                    }
                }
            }
            assert!(
                seen.is_empty(),
                "subspace {s} holds objects the key subspace does not: {seen:?}"
            );
        }
    }
}

/// One step of a schedule, decoded from two random numbers.
fn step(m: &mut Model, op: u8, arg: u16) {
    let key = i64::from(arg % KEYS);
    match op % 12 {
        0..=3 => m.start(key, Some(row(key, arg / KEYS))),
        4 => m.start(key, None),
        5..=8 => {
            if !m.updates.is_empty() {
                let i = usize::from(arg) % m.updates.len();
                m.deliver(i);
            }
        }
        9 => {
            if !m.delivered.is_empty() {
                let i = usize::from(arg) % m.delivered.len();
                m.retransmit(i);
            }
        }
        10 => m.failover(),
        _ => {
            // Deliver whatever can go, oldest first.
            for i in 0..m.updates.len().min(3) {
                if i < m.updates.len() {
                    m.deliver(i);
                }
            }
        }
    }
    m.check_search_view();
}

/// Delivers everything, checking that some link always makes progress.
fn drain(m: &mut Model) {
    while !m.updates.is_empty() {
        let progressed = (0..m.updates.len())
            .rev()
            .any(|i| i < m.updates.len() && m.deliver(i));
        assert!(progressed, "chains deadlocked: {} waiting", m.updates.len());
        m.check_search_view();
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("CAIRN_FUZZ_SEEDS").ok().and_then(|s| s.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn subspaces_converge_to_the_key_subspace(schedule in proptest::collection::vec((any::<u8>(), any::<u16>()), 0..300)) {
        let mut m = Model::new();
        for (op, arg) in schedule {
            step(&mut m, op, arg);
        }
        drain(&mut m);
        m.check_converged();
        // Every link ever delivered is a duplicate now.
        for i in 0..m.delivered.len() {
            m.retransmit(i);
        }
    }
}

#[test]
fn a_long_schedule_converges() {
    // A fixed, long schedule with many overlapping chains on few keys.
    let mut m = Model::new();
    let mut x: u32 = 0x9e37_79b9;
    for _ in 0..20_000 {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        step(&mut m, (x & 0xff) as u8, (x >> 16) as u16);
    }
    drain(&mut m);
    m.check_converged();
}
