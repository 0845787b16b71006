//! Output helpers shared by the tools: aligned text tables, values, durations and
//! latency percentiles.

use std::time::Duration;

use arrow::util::display::{ArrayFormatter, FormatOptions};
use cairn_common::types::array_from_values;
use cairn_common::{DataType, Value};

/// Formats rows as an aligned text table with a header line.
pub fn text_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: &mut dyn Iterator<Item = &str>| -> String {
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            let w = widths.get(i).copied().unwrap_or(0);
            if i > 0 {
                s.push_str("  ");
            }
            s.push_str(c);
            if i + 1 < widths.len() {
                s.push_str(&" ".repeat(w.saturating_sub(c.chars().count())));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = String::new();
    out.push_str(&line(&mut headers.iter().copied()));
    out.push('\n');
    let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
    out.push_str(&line(&mut dashes.iter().map(String::as_str)));
    out.push('\n');
    for r in rows {
        out.push_str(&line(&mut r.iter().map(String::as_str)));
        out.push('\n');
    }
    out
}

/// A value as a user would type it: decimals with their scale, dates and timestamps
/// in ISO form, strings quoted.
pub fn format_value(v: &Value, t: &DataType) -> String {
    match v {
        Value::Null => return "NULL".into(),
        Value::String(s) => return format!("'{}'", s.replace('\'', "''")),
        Value::Binary(b) => {
            return format!(
                "0x{}",
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            );
        }
        _ => {}
    }
    array_from_values(t, std::iter::once(v))
        .ok()
        .and_then(|a| {
            let f = ArrayFormatter::try_new(a.as_ref(), &FormatOptions::default()).ok()?;
            Some(f.value(0).to_string())
        })
        .unwrap_or_else(|| v.to_string())
}

/// A duration in milliseconds with enough digits for sub-millisecond latencies.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.3} ms")
    } else if ms < 1000.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

/// The `p`-th percentile (0 < p ≤ 100) of sorted samples, nearest-rank method;
/// zero when there are none.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let n = sorted.len();
    let rank = ((p / 100.0) * n as f64).ceil() as usize;
    sorted[rank.clamp(1, n) - 1]
}

/// "p50 … p95 … p99 … max …" of unsorted samples.
pub fn latency_summary(samples: &mut [Duration]) -> String {
    samples.sort_unstable();
    format!(
        "p50 {}  p95 {}  p99 {}  max {}",
        ms(percentile(samples, 50.0)),
        ms(percentile(samples, 95.0)),
        ms(percentile(samples, 99.0)),
        ms(samples.last().copied().unwrap_or_default())
    )
}

/// A rate per second, with thousands grouped for readability.
pub fn per_sec(n: u64, elapsed: Duration) -> String {
    let secs = elapsed.as_secs_f64();
    if secs <= 0.0 {
        return "-".into();
    }
    group_thousands((n as f64 / secs).round() as u64)
}

/// `1234567` → `1,234,567`.
pub fn group_thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&v, 95.0), Duration::from_millis(95));
        assert_eq!(percentile(&v, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&v, 100.0), Duration::from_millis(100));
        assert_eq!(percentile(&v, 0.0), Duration::from_millis(1));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
        let one = [Duration::from_millis(7)];
        assert_eq!(percentile(&one, 99.0), Duration::from_millis(7));
        let mut unsorted = vec![
            Duration::from_millis(3),
            Duration::from_millis(1),
            Duration::from_millis(2),
        ];
        let s = latency_summary(&mut unsorted);
        assert!(s.starts_with("p50 2.000 ms"), "{s}");
        assert!(s.ends_with("max 3.000 ms"), "{s}");
    }

    #[test]
    fn tables_and_values_format() {
        let t = text_table(
            &["name", "type"],
            &[
                vec!["id".into(), "INT64".into()],
                vec!["price".into(), "DECIMAL(10,2)".into()],
            ],
        );
        assert_eq!(
            t,
            "name   type\n-----  -------------\nid     INT64\nprice  DECIMAL(10,2)\n"
        );
        let dec = DataType::Decimal {
            precision: 10,
            scale: 2,
        };
        assert_eq!(format_value(&Value::Decimal(1234), &dec), "12.34");
        assert_eq!(format_value(&Value::Date(0), &DataType::Date), "1970-01-01");
        assert!(
            format_value(&Value::Timestamp(1_000_000), &DataType::Timestamp)
                .starts_with("1970-01-01T00:00:01")
        );
        assert_eq!(
            format_value(&Value::String("it's".into()), &DataType::String),
            "'it''s'"
        );
        assert_eq!(
            format_value(&Value::Binary(vec![1, 255]), &DataType::Binary),
            "0x01ff"
        );
        assert_eq!(format_value(&Value::Null, &DataType::Int64), "NULL");
        assert_eq!(group_thousands(1234567), "1,234,567");
        assert_eq!(group_thousands(12), "12");
        assert_eq!(group_thousands(123456), "123,456");
    }
}
