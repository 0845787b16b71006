//! The storage benchmark's results — one figure per measurement, as a table, as
//! Markdown and as JSON lines — and the environment recorded with them (machine, file
//! system, git revision).

use std::fmt::Write as _;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

// ----- results --------------------------------------------------------------------

/// One reported figure: Cairn's, its peer's (if any), their ratio and the target.
pub(super) struct Measurement {
    /// Stable identifier (JSON).
    pub(super) id: &'static str,
    /// What was measured.
    pub(super) label: String,
    /// Cairn's figure.
    pub(super) cairn: Figure,
    /// The peer and its figure.
    pub(super) peer: Option<(String, Figure)>,
    /// Cairn speed / peer speed (> 1: Cairn is faster).
    pub(super) ratio: Option<f64>,
    /// The target, in words, and whether it was met.
    pub(super) target: Option<(String, bool)>,
}

#[derive(Clone, Copy)]
pub(super) enum Figure {
    /// Rows per second.
    Rate(f64),
    /// Seconds.
    Secs(f64),
    /// Microseconds.
    Micros(f64),
    /// Bytes.
    Bytes(u64),
}

impl Figure {
    pub(super) fn value(self) -> f64 {
        match self {
            Figure::Rate(v) | Figure::Secs(v) | Figure::Micros(v) => v,
            Figure::Bytes(b) => b as f64,
        }
    }
    pub(super) fn unit(self) -> &'static str {
        match self {
            Figure::Rate(_) => "rows/s",
            Figure::Secs(_) => "s",
            Figure::Micros(_) => "us",
            Figure::Bytes(_) => "bytes",
        }
    }
}

impl std::fmt::Display for Figure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Figure::Rate(r) if r >= 1e6 => write!(f, "{:.2} M rows/s", r / 1e6),
            Figure::Rate(r) => write!(f, "{:.0} k rows/s", r / 1e3),
            Figure::Secs(s) if s < 1.0 => write!(f, "{:.1} ms", s * 1e3),
            Figure::Secs(s) => write!(f, "{s:.2} s"),
            Figure::Micros(us) => write!(f, "{us:.1} µs"),
            Figure::Bytes(b) => write!(f, "{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        }
    }
}

impl Measurement {
    pub(super) fn new(id: &'static str, label: impl Into<String>, cairn: Figure) -> Self {
        Measurement {
            id,
            label: label.into(),
            cairn,
            peer: None,
            ratio: None,
            target: None,
        }
    }
    /// Adds a peer; the ratio is Cairn speed / peer speed whatever the unit.
    pub(super) fn peer(mut self, name: impl Into<String>, fig: Figure) -> Self {
        let (c, p) = (self.cairn.value(), fig.value());
        self.ratio = Some(match self.cairn {
            Figure::Rate(_) => c / p,
            _ => p / c,
        });
        self.peer = Some((name.into(), fig));
        self
    }
    pub(super) fn target(mut self, words: impl Into<String>, met: bool) -> Self {
        self.target = Some((words.into(), met));
        self
    }
    pub(super) fn cells(&self) -> [String; 6] {
        [
            self.label.clone(),
            self.cairn.to_string(),
            self.peer
                .as_ref()
                .map_or("—".into(), |(n, f)| format!("{f} ({n})")),
            self.ratio.map_or("—".into(), |r| format!("{r:.2}")),
            self.target.as_ref().map_or("—".into(), |(t, _)| t.clone()),
            self.target
                .as_ref()
                .map_or("—".into(), |(_, m)| if *m { "yes" } else { "NO" }.into()),
        ]
    }
}

pub(super) const HEADERS: [&str; 6] = ["measurement", "Cairn", "peer", "ratio", "target", "met"];

pub(super) fn text_table(rows: &[Measurement]) -> String {
    let cells: Vec<[String; 6]> = rows.iter().map(Measurement::cells).collect();
    let mut widths: Vec<usize> = HEADERS.iter().map(|h| h.chars().count()).collect();
    for r in &cells {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cols: &[String]| -> String {
        let parts: Vec<String> = cols
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c}{}", " ".repeat(w - c.chars().count())))
            .collect();
        format!("| {} |\n", parts.join(" | "))
    };
    let mut out = line(&HEADERS.map(String::from));
    out.push_str(&format!(
        "|{}|\n",
        widths
            .iter()
            .map(|w| "-".repeat(w + 2))
            .collect::<Vec<_>>()
            .join("|")
    ));
    for r in &cells {
        out.push_str(&line(r));
    }
    out
}

pub(super) fn markdown_table(rows: &[Measurement]) -> String {
    let mut out = format!("| {} |\n", HEADERS.join(" | "));
    out.push_str(&format!("|{}|\n", vec!["---"; HEADERS.len()].join("|")));
    for r in rows {
        out.push_str(&format!("| {} |\n", r.cells().join(" | ")));
    }
    out
}

pub(crate) fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub(crate) fn json_num(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".into()
    }
}

pub(super) fn json_line(env: &Env, m: &Measurement) -> String {
    let mut s = format!(
        "{{\"date\":{},\"git\":{},\"sf\":{},\"rows\":{},\"measurement\":{},\"label\":{},\
         \"cairn\":{},\"unit\":{}",
        json_str(&env.date),
        json_str(&env.git),
        json_num(env.sf),
        env.rows,
        json_str(m.id),
        json_str(&m.label),
        json_num(m.cairn.value()),
        json_str(m.cairn.unit()),
    );
    if let Some((name, f)) = &m.peer {
        let _ = write!(
            s,
            ",\"peer\":{},\"peer_value\":{},\"peer_unit\":{}",
            json_str(name),
            json_num(f.value()),
            json_str(f.unit())
        );
    }
    if let Some(r) = m.ratio {
        let _ = write!(s, ",\"ratio\":{}", json_num(r));
    }
    if let Some((t, met)) = &m.target {
        let _ = write!(s, ",\"target\":{},\"met\":{met}", json_str(t));
    }
    s.push('}');
    s
}

// ----- environment ----------------------------------------------------------------

pub(super) struct Env {
    pub(super) date: String,
    pub(super) git: String,
    pub(super) sf: f64,
    pub(super) rows: usize,
    pub(super) cpus: usize,
    pub(super) mem: String,
    pub(super) cpu_model: String,
    pub(super) work_dir: String,
}

pub(crate) fn utc_now() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

pub(crate) fn git_revision() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .map(|rev| {
            let dirty = std::process::Command::new("git")
                .args(["status", "--porcelain", "--untracked-files=no"])
                .output()
                .ok()
                .filter(|o| o.status.success())
                .is_some_and(|o| !o.stdout.is_empty());
            if dirty {
                format!("{rev} (uncommitted changes)")
            } else {
                rev
            }
        })
        .unwrap_or_else(|| "unknown".into())
}

pub(crate) fn proc_field(file: &str, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(file).ok()?;
    text.lines()
        .find(|l| l.split(':').next().is_some_and(|k| k.trim() == key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

pub(crate) fn total_memory() -> String {
    proc_field("/proc/meminfo", "MemTotal")
        .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .map_or("unknown".into(), |kib| {
            format!("{:.1} GiB", kib as f64 / (1u64 << 20) as f64)
        })
}

/// The filesystem type holding `path` (longest mount point prefix in /proc/mounts).
pub(crate) fn fs_type(path: &Path) -> String {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return "unknown".into();
    };
    mounts
        .lines()
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let (_, mnt, ty) = (it.next()?, it.next()?, it.next()?);
            path.starts_with(mnt).then(|| (mnt.len(), ty.to_string()))
        })
        .max_by_key(|(n, _)| *n)
        .map_or("unknown".into(), |(_, t)| t)
}

/// Bytes of the rowset files under `dir`: [base, keys, undo, redo, other].
pub(super) fn rowset_file_sizes(dir: &Path) -> [u64; 5] {
    let mut out = [0u64; 5];
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(meta) = e.metadata() else { continue };
            if meta.is_dir() {
                stack.push(e.path());
                continue;
            }
            let name = e.file_name().to_string_lossy().to_string();
            let slot = if name.starts_with("base-") {
                0
            } else if name == "keys" {
                1
            } else if name.starts_with("undo-") {
                2
            } else if name.starts_with("redo-") {
                3
            } else {
                4
            };
            out[slot] += meta.len();
        }
    }
    out
}
