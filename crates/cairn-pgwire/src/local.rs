//! Session statements the PostgreSQL front end answers itself.
//!
//! Drivers send statements at connect time and around every transaction that mean
//! nothing to Cairn: `SET extra_float_digits = 3`, `SET application_name = '…'`,
//! `SHOW TRANSACTION ISOLATION LEVEL`, `BEGIN` / `COMMIT` / `ROLLBACK`, `DISCARD
//! ALL`. They are recognised here from their first words and answered without
//! the engine:
//!
//! - `SET` of any variable outside the `cairn.` and `datafusion.` namespaces is
//!   accepted and remembered for `SHOW`, but has no effect (output is always UTF8, ISO
//!   dates, UTC). `client_encoding` accepts only UTF8.
//! - `SHOW` of a well-known PostgreSQL variable (or one set before), or of a session
//!   setting (`cairn.…`, `datafusion.…`), is answered with one text column.
//! - `BEGIN`, `COMMIT`, `ROLLBACK` and `SET TRANSACTION` run the session's
//!   transaction ([`cairn_sql::txn`]); the block's state (failed, savepoints) is kept by
//!   [`super::txn::TxBlock`]. `ROLLBACK TO SAVEPOINT` is refused (0A000) when there
//!   would be writes to undo.
//!
//! `SET` and `RESET` of `cairn.…` / `datafusion.…` settings, `SHOW ALL`, and everything
//! else go to the engine.

use std::collections::BTreeMap;

use std::sync::Arc;

use datafusion::arrow::array::{Array, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{DataFusionError, ScalarValue};
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, TypeSignature,
    Volatility,
};
use parking_lot::Mutex;

use cairn_sql::error::SqlError;

use super::sqltext::{Tok, rest_after, tokens};

/// A statement answered by the front end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Local {
    /// `BEGIN` / `START TRANSACTION`, with the command tag and the words of its
    /// transaction modes.
    Begin(&'static str, Vec<String>),
    /// `SET TRANSACTION …` (the words after `SET`).
    SetTransaction(Vec<String>),
    /// `SET SESSION CHARACTERISTICS AS TRANSACTION …` (the words after `AS`).
    SetCharacteristics(Vec<String>),
    /// `COMMIT` / `END`.
    Commit,
    /// `ROLLBACK` / `ABORT`.
    Rollback,
    /// `SET name = value` (`None`: back to the default).
    Set {
        /// Lower-case variable name.
        name: String,
        /// The value as text, list items joined with `, `.
        value: Option<String>,
    },
    /// `RESET name` (`None`: `RESET ALL`).
    Reset(Option<String>),
    /// `SHOW name` (answered here if the variable is known, see `Conn::show_value`).
    Show(String),
    /// A statement accepted without effect, with its command tag (`SET` of
    /// transaction characteristics, `DISCARD ALL`, ...).
    Noop(&'static str),
    /// `SAVEPOINT name`.
    Savepoint(String),
    /// `RELEASE [SAVEPOINT] name`.
    Release(String),
    /// `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] name`.
    RollbackTo(String),
}

impl Local {
    /// Whether the statement may run in a failed transaction block: it ends the
    /// block or rolls back within it.
    pub(crate) fn ends_block(&self) -> bool {
        matches!(self, Local::Commit | Local::Rollback | Local::RollbackTo(_))
    }
}

/// The savepoint name after token `i` (skipping the word `savepoint`); `None` if
/// there is none.
fn savepoint_name(toks: &[Tok], mut i: usize) -> Option<String> {
    if matches!(toks.get(i), Some(t) if t.is_word("savepoint")) {
        i += 1;
    }
    match toks.get(i)? {
        Tok::Word(w) => Some(w.clone()),
        Tok::Quoted(q) => Some(q.clone()),
        _ => None,
    }
}

/// The words from token `i` on (transaction modes), up to a `;`.
fn words_from(toks: &[Tok], i: usize) -> Vec<String> {
    toks.iter()
        .skip(i)
        .take_while(|t| **t != Tok::Punct(';'))
        .filter(|t| **t != Tok::Punct(','))
        .map(Tok::text)
        .collect()
}

/// Namespaces of settings that belong to the engine.
fn engine_setting(name: &str) -> bool {
    name.starts_with("cairn.") || name.starts_with("datafusion.")
}

/// Recognises a statement the front end answers itself; `None` for everything else.
pub(crate) fn classify(sql: &str) -> Option<Local> {
    let toks = tokens(sql, 64);
    let first = toks.first()?;
    let word = |i: usize| match toks.get(i) {
        Some(Tok::Word(w)) => w.as_str(),
        _ => "",
    };
    let Tok::Word(first) = first else {
        return None;
    };
    match first.as_str() {
        "begin" => Some(Local::Begin("BEGIN", words_from(&toks, 1))),
        "start" if word(1) == "transaction" => {
            Some(Local::Begin("START TRANSACTION", words_from(&toks, 2)))
        }
        "commit" | "end" => {
            if word(1) == "prepared" {
                None
            } else {
                Some(Local::Commit)
            }
        }
        "abort" => Some(Local::Rollback),
        "rollback" => {
            if word(1) == "prepared" {
                None
            } else if let Some(to) = toks.iter().position(|t| t.is_word("to")) {
                // A missing name is left to the engine, which reports the syntax error.
                savepoint_name(&toks, to + 1).map(Local::RollbackTo)
            } else {
                Some(Local::Rollback)
            }
        }
        "savepoint" => savepoint_name(&toks, 1).map(Local::Savepoint),
        "release" => savepoint_name(&toks, 1).map(Local::Release),
        "discard" => Some(Local::Noop(match word(1) {
            "plans" => "DISCARD PLANS",
            "sequences" => "DISCARD SEQUENCES",
            "temp" | "temporary" => "DISCARD TEMP",
            _ => "DISCARD ALL",
        })),
        "deallocate" => Some(Local::Noop("DEALLOCATE")),
        "set" => classify_set(sql, &toks),
        "reset" => {
            if word(1) == "all" {
                return Some(Local::Reset(None));
            }
            let (name, _) = dotted_name(&toks, 1);
            if name.is_empty() || engine_setting(&name) {
                None
            } else {
                Some(Local::Reset(Some(canonical(&name))))
            }
        }
        "show" => {
            let name = match (word(1), word(2), word(3)) {
                ("transaction", "isolation", "level") => "transaction_isolation".to_string(),
                ("time", "zone", _) => "timezone".to_string(),
                ("session", "authorization", _) => "session_authorization".to_string(),
                _ => {
                    let (name, next) = dotted_name(&toks, 1);
                    if next != toks.len() {
                        return None;
                    }
                    canonical(&name)
                }
            };
            if name.is_empty() {
                None
            } else {
                Some(Local::Show(name))
            }
        }
        _ => None,
    }
}

fn classify_set(sql: &str, toks: &[Tok]) -> Option<Local> {
    let mut i = 1;
    if matches!(toks.get(i), Some(t) if t.is_word("session") || t.is_word("local")) {
        // `SET SESSION AUTHORIZATION …` / `SET SESSION CHARACTERISTICS AS …`
        if matches!(toks.get(i + 1), Some(t) if t.is_word("characteristics")) {
            return Some(Local::SetCharacteristics(words_from(toks, i + 3)));
        }
        if matches!(toks.get(i + 1), Some(t) if t.is_word("authorization")) {
            return Some(Local::Noop("SET"));
        }
        i += 1;
    }
    let word = |j: usize| match toks.get(j) {
        Some(Tok::Word(w)) => w.as_str(),
        _ => "",
    };
    match word(i) {
        "transaction" if word(i + 1) != "snapshot" => {
            return Some(Local::SetTransaction(words_from(toks, i)));
        }
        "transaction" | "constraints" | "role" | "xml" => return Some(Local::Noop("SET")),
        "time" if word(i + 1) == "zone" => {
            let value = list_value(&toks[i + 2..]);
            let value = match value.as_deref().map(str::to_lowercase).as_deref() {
                Some("local") | Some("default") | None => None,
                _ => value,
            };
            return Some(Local::Set {
                name: "timezone".into(),
                value,
            });
        }
        "names" => {
            return Some(Local::Set {
                name: "client_encoding".into(),
                value: list_value(&toks[i + 1..]),
            });
        }
        "schema" => {
            return Some(Local::Set {
                name: "search_path".into(),
                value: list_value(&toks[i + 1..]),
            });
        }
        _ => {}
    }
    let (name, next) = dotted_name(toks, i);
    if name.is_empty() || engine_setting(&name) {
        return None;
    }
    let value_at = match toks.get(next) {
        Some(t) if t.is_word("to") || *t == Tok::Punct('=') => next + 1,
        _ => next,
    };
    let value = if toks.len() >= 64 {
        // A long value: keep its text as written.
        Some(rest_after(sql, value_at).to_string())
    } else {
        list_value(&toks[value_at..])
    };
    let value = match value {
        Some(v) if v.eq_ignore_ascii_case("default") => None,
        other => other,
    };
    Some(Local::Set {
        name: canonical(&name),
        value,
    })
}

/// A possibly dotted name starting at token `i`; returns it (lower case for unquoted
/// parts) and the index of the token after it.
fn dotted_name(toks: &[Tok], mut i: usize) -> (String, usize) {
    let mut name = String::new();
    while let Some(Tok::Word(w) | Tok::Quoted(w)) = toks.get(i) {
        name.push_str(w);
        i += 1;
        if toks.get(i) == Some(&Tok::Punct('.')) {
            name.push('.');
            i += 1;
        } else {
            break;
        }
    }
    (name, i)
}

/// A `SET` value: items separated by commas, each item's tokens concatenated
/// (`-1`), items joined with `, `. `None` when there is no value.
fn list_value(toks: &[Tok]) -> Option<String> {
    let mut items: Vec<String> = vec![String::new()];
    for t in toks {
        match t {
            Tok::Punct(',') => items.push(String::new()),
            Tok::Punct(';') => break,
            other => {
                if let Some(last) = items.last_mut() {
                    last.push_str(&other.text());
                }
            }
        }
    }
    let value = items.join(", ");
    if value.is_empty() { None } else { Some(value) }
}

/// The canonical (lower-case) spelling of a variable name; synonyms are mapped.
fn canonical(name: &str) -> String {
    let lower = name.to_lowercase();
    match lower.as_str() {
        "time zone" => "timezone".into(),
        "names" => "client_encoding".into(),
        _ => lower,
    }
}

/// The column name PostgreSQL gives `SHOW name`.
pub(crate) fn show_column(name: &str) -> &str {
    match name {
        "datestyle" => "DateStyle",
        "timezone" => "TimeZone",
        "intervalstyle" => "IntervalStyle",
        other => other,
    }
}

/// The values reported for well-known PostgreSQL variables until a client sets them.
fn default_value(name: &str) -> Option<&'static str> {
    Some(match name {
        "server_version" => super::SERVER_VERSION,
        "server_version_num" => super::SERVER_VERSION_NUM,
        "server_encoding" | "client_encoding" => "UTF8",
        "datestyle" => "ISO, MDY",
        "timezone" | "log_timezone" => "UTC",
        "intervalstyle" => "postgres",
        "integer_datetimes" => "on",
        "standard_conforming_strings" => "on",
        "search_path" => "public",
        "transaction_isolation" | "default_transaction_isolation" => "read committed",
        "transaction_read_only" | "default_transaction_read_only" => "off",
        "in_hot_standby" => "off",
        "is_superuser" => "on",
        "application_name" => "",
        "extra_float_digits" => "1",
        "bytea_output" => "hex",
        "max_identifier_length" => "63",
        "max_index_keys" => "32",
        "block_size" => "8192",
        "lc_collate" | "lc_ctype" | "lc_messages" | "lc_monetary" | "lc_numeric" | "lc_time" => "C",
        "statement_timeout"
        | "lock_timeout"
        | "idle_in_transaction_session_timeout"
        | "idle_session_timeout" => "0",
        "client_min_messages" => "notice",
        "synchronous_commit" => "on",
        "max_connections" => "100",
        "ssl" => "off",
        _ => return None,
    })
}

/// One connection's PostgreSQL variables: what the client set, over the defaults.
#[derive(Debug, Default)]
pub(crate) struct Vars {
    set: Mutex<BTreeMap<String, String>>,
}

impl Vars {
    /// Sets (or, with `None`, resets) a variable. Fails for values Cairn cannot honour.
    pub(crate) fn set(&self, name: &str, value: Option<String>) -> Result<(), String> {
        if name == "client_encoding"
            && let Some(v) = &value
        {
            let v = v.to_lowercase().replace(['-', '_'], "");
            if v != "utf8" && v != "unicode" {
                return Err(format!(
                    "client_encoding {v} is not supported: Cairn speaks UTF8 only"
                ));
            }
        }
        if name == "default_transaction_isolation"
            && let Some(v) = &value
            && cairn_sql::txn::Isolation::parse(v).is_none()
        {
            return Err(format!(
                "invalid value for parameter \"default_transaction_isolation\": \"{v}\" (use \
                 read committed, repeatable read or serializable)"
            ));
        }
        if name == "statement_timeout"
            && let Some(v) = &value
            && parse_duration_ms(v).is_none()
        {
            return Err(format!(
                "invalid value for parameter \"statement_timeout\": \"{v}\" (use milliseconds, \
                 or a number with a unit: us, ms, s, min, h, d; 0 turns it off)"
            ));
        }
        let mut set = self.set.lock();
        match value {
            Some(v) => {
                set.insert(name.to_string(), v);
            }
            None => {
                set.remove(name);
            }
        }
        Ok(())
    }

    /// Resets every variable the client set.
    pub(crate) fn reset_all(&self) {
        self.set.lock().clear();
    }

    /// The value of a variable, if it was set or is well known.
    pub(crate) fn get(&self, name: &str) -> Option<String> {
        if let Some(v) = self.set.lock().get(name) {
            return Some(v.clone());
        }
        default_value(name).map(str::to_string)
    }

    /// The connection's `statement_timeout`, if one is set (0 means none).
    pub(crate) fn statement_timeout(&self) -> Option<std::time::Duration> {
        let ms = parse_duration_ms(&self.get("statement_timeout")?)?;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }
}

/// `current_setting(name [, missing_ok])`: a variable of the connection, as `SHOW`
/// reports it. An unknown name fails with 42704, or is NULL with `missing_ok`.
#[derive(Debug)]
pub(crate) struct CurrentSetting {
    vars: Arc<Vars>,
    signature: Signature,
}

impl CurrentSetting {
    /// The function for one connection's variables.
    pub(crate) fn udf(vars: Arc<Vars>) -> ScalarUDF {
        ScalarUDF::new_from_impl(CurrentSetting {
            vars,
            signature: Signature::one_of(
                vec![
                    TypeSignature::Exact(vec![DataType::Utf8]),
                    TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean]),
                ],
                Volatility::Stable,
            ),
        })
    }
}

impl PartialEq for CurrentSetting {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.vars, &other.vars)
    }
}
impl Eq for CurrentSetting {}
impl std::hash::Hash for CurrentSetting {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        Arc::as_ptr(&self.vars).hash(state);
    }
}

impl ScalarUDFImpl for CurrentSetting {
    fn name(&self) -> &str {
        "current_setting"
    }
    fn signature(&self) -> &Signature {
        &self.signature
    }
    fn return_type(&self, _args: &[DataType]) -> datafusion::common::Result<DataType> {
        Ok(DataType::Utf8)
    }
    fn invoke_with_args(
        &self,
        args: ScalarFunctionArgs,
    ) -> datafusion::common::Result<ColumnarValue> {
        let missing_ok = matches!(
            args.args.get(1),
            Some(ColumnarValue::Scalar(ScalarValue::Boolean(Some(true))))
        );
        let names = args.args[0].to_array(args.number_rows)?;
        let Some(names) = names.as_any().downcast_ref::<StringArray>() else {
            return Err(DataFusionError::Plan("current_setting takes text".into()));
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names.iter() {
            out.push(match name {
                None => None,
                Some(n) => match self.vars.get(&canonical(n)) {
                    Some(v) => Some(v),
                    None if missing_ok => None,
                    None => {
                        return Err(DataFusionError::External(Box::new(SqlError::other(
                            "42704",
                            format!("unrecognized configuration parameter \"{n}\""),
                        ))));
                    }
                },
            });
        }
        Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
    }
}

/// A PostgreSQL time setting in milliseconds: a bare number is milliseconds, or a
/// number with a unit (`us`, `ms`, `s`, `min`, `h`, `d`), as in `SET
/// statement_timeout = '5s'`. Fractions round down to whole milliseconds.
pub(crate) fn parse_duration_ms(v: &str) -> Option<u64> {
    let v = v.trim().trim_matches('\'').trim();
    let split = v
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(v.len());
    let (num, unit) = v.split_at(split);
    let n: f64 = num.parse().ok()?;
    let per_ms = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "ms" => 1.0,
        "us" => 0.001,
        "s" => 1000.0,
        "min" => 60_000.0,
        "h" => 3_600_000.0,
        "d" => 86_400_000.0,
        _ => return None,
    };
    let ms = n * per_ms;
    (ms.is_finite() && ms >= 0.0 && ms < u64::MAX as f64).then_some(ms as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(name: &str, value: Option<&str>) -> Option<Local> {
        Some(Local::Set {
            name: name.into(),
            value: value.map(str::to_string),
        })
    }

    fn words(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn transactions() {
        assert_eq!(classify("BEGIN"), Some(Local::Begin("BEGIN", vec![])));
        assert_eq!(
            classify("begin transaction isolation level serializable;"),
            Some(Local::Begin(
                "BEGIN",
                words("transaction isolation level serializable")
            ))
        );
        assert_eq!(
            classify("START TRANSACTION READ ONLY, ISOLATION LEVEL REPEATABLE READ"),
            Some(Local::Begin(
                "START TRANSACTION",
                words("read only isolation level repeatable read")
            ))
        );
        assert_eq!(classify("commit"), Some(Local::Commit));
        assert_eq!(classify("END WORK"), Some(Local::Commit));
        assert_eq!(classify("ROLLBACK"), Some(Local::Rollback));
        assert_eq!(classify("abort"), Some(Local::Rollback));
        assert_eq!(
            classify("ROLLBACK TO SAVEPOINT s1"),
            Some(Local::RollbackTo("s1".into()))
        );
        assert_eq!(
            classify("rollback work to \"S 2\""),
            Some(Local::RollbackTo("S 2".into()))
        );
        assert_eq!(
            classify("savepoint S1"),
            Some(Local::Savepoint("s1".into()))
        );
        assert_eq!(classify("RELEASE s1"), Some(Local::Release("s1".into())));
        assert_eq!(
            classify("RELEASE SAVEPOINT s1"),
            Some(Local::Release("s1".into()))
        );
        assert_eq!(classify("COMMIT PREPARED 'x'"), None);
        assert_eq!(classify("DISCARD ALL"), Some(Local::Noop("DISCARD ALL")));
    }

    #[test]
    fn set_statements() {
        assert_eq!(
            classify("SET extra_float_digits = 3"),
            set("extra_float_digits", Some("3"))
        );
        assert_eq!(
            classify("set extra_float_digits to -1"),
            set("extra_float_digits", Some("-1"))
        );
        assert_eq!(
            classify("SET application_name = 'PostgreSQL JDBC Driver'"),
            set("application_name", Some("PostgreSQL JDBC Driver"))
        );
        assert_eq!(
            classify("SET SESSION DateStyle TO ISO, MDY"),
            set("datestyle", Some("iso, mdy"))
        );
        assert_eq!(
            classify("SET TIME ZONE 'UTC'"),
            set("timezone", Some("UTC"))
        );
        assert_eq!(classify("SET TIME ZONE LOCAL"), set("timezone", None));
        assert_eq!(
            classify("SET search_path TO DEFAULT"),
            set("search_path", None)
        );
        assert_eq!(
            classify("SET NAMES 'UTF8'"),
            set("client_encoding", Some("UTF8"))
        );
        assert_eq!(
            classify("SET LOCAL statement_timeout = 0"),
            set("statement_timeout", Some("0"))
        );
        assert_eq!(
            classify("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL SERIALIZABLE"),
            Some(Local::SetCharacteristics(words(
                "transaction isolation level serializable"
            )))
        );
        assert_eq!(
            classify("SET TRANSACTION READ ONLY"),
            Some(Local::SetTransaction(words("transaction read only")))
        );
        assert_eq!(classify("SET cairn.read_timestamp = '2026-01-01'"), None);
        assert_eq!(classify("SET datafusion.execution.batch_size = 10"), None);
    }

    #[test]
    fn show_and_reset() {
        assert_eq!(
            classify("SHOW TRANSACTION ISOLATION LEVEL"),
            Some(Local::Show("transaction_isolation".into()))
        );
        assert_eq!(
            classify("show TimeZone"),
            Some(Local::Show("timezone".into()))
        );
        assert_eq!(
            classify("SHOW TIME ZONE"),
            Some(Local::Show("timezone".into()))
        );
        assert_eq!(
            classify("SHOW cairn.read_timestamp"),
            Some(Local::Show("cairn.read_timestamp".into()))
        );
        assert_eq!(classify("SHOW TABLES"), Some(Local::Show("tables".into())));
        assert_eq!(classify("SHOW COLUMNS FROM t"), None);
        assert_eq!(classify("RESET ALL"), Some(Local::Reset(None)));
        assert_eq!(
            classify("RESET application_name"),
            Some(Local::Reset(Some("application_name".into())))
        );
        assert_eq!(classify("RESET cairn.pushdown"), None);
    }

    #[test]
    fn other_statements_go_to_the_engine() {
        assert_eq!(classify("SELECT 1"), None);
        assert_eq!(classify("INSERT INTO t VALUES (1)"), None);
        assert_eq!(classify("-- c\n select 'BEGIN'"), None);
        assert_eq!(classify(""), None);
    }

    #[test]
    fn vars_remember_values_over_defaults() {
        let vars = Vars::default();
        vars.set("application_name", Some("psql".into())).unwrap();
        assert_eq!(vars.get("application_name").as_deref(), Some("psql"));
        assert_eq!(
            vars.get("transaction_isolation").as_deref(),
            Some("read committed")
        );
        assert_eq!(vars.get("no_such_thing"), None);
        vars.set("no_such_thing", Some("x".into())).unwrap();
        assert_eq!(vars.get("no_such_thing").as_deref(), Some("x"));
        vars.set("client_encoding", Some("utf-8".into())).unwrap();
        assert!(vars.set("client_encoding", Some("LATIN1".into())).is_err());
        vars.set("application_name", None).unwrap();
        assert_eq!(vars.statement_timeout(), None);
        vars.set("statement_timeout", Some("1.5s".into())).unwrap();
        assert_eq!(
            vars.statement_timeout(),
            Some(std::time::Duration::from_millis(1500))
        );
        vars.set("statement_timeout", Some("250".into())).unwrap();
        assert_eq!(
            vars.statement_timeout(),
            Some(std::time::Duration::from_millis(250))
        );
        assert!(vars.set("statement_timeout", Some("soon".into())).is_err());
        assert!(vars.set("statement_timeout", Some("-1".into())).is_err());
        assert_eq!(parse_duration_ms("2min"), Some(120_000));
        assert_eq!(parse_duration_ms("0"), Some(0));
        assert_eq!(vars.get("application_name").as_deref(), Some(""));
        vars.reset_all();
        assert_eq!(vars.get("no_such_thing"), None);
    }
}
