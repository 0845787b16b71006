//! User and privilege statements: `CREATE USER`/`ROLE`, `ALTER USER`/`ROLE`, `DROP
//! USER`/`ROLE`, `GRANT` and `REVOKE`, parsed here and carried out by the master.
//!
//! Cairn follows PostgreSQL's spelling for what it supports:
//!
//! ```sql
//! CREATE USER ann WITH PASSWORD 'secret' [SUPERUSER] [CREATEDB] [LOGIN];
//! ALTER USER ann WITH PASSWORD 'new' | NOSUPERUSER | CREATEDB | …;
//! DROP USER [IF EXISTS] ann, bob;
//! GRANT SELECT, INSERT ON [TABLE] orders, items TO ann;
//! GRANT ALL [PRIVILEGES] ON ALL TABLES IN SCHEMA public TO ann;
//! GRANT CREATE ON SCHEMA public TO ann;   -- or ON DATABASE cairn
//! REVOKE … FROM ann;
//! ```
//!
//! A password is turned into a SCRAM-SHA-256 verifier before it leaves the SQL server
//! (psql's `\password` sends a verifier already; it is kept as is). Roles are users:
//! there are no groups, so `GRANT role TO user` is not supported.

use cairn_proto::auth::{Privileges, ScramVerifier, UserOp, check_user_op};
use datafusion::sql::sqlparser::ast::Ident;
use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use crate::error::{Result, SqlError};
use crate::parser::ParseError;

/// A parsed user or privilege statement.
#[derive(Debug, Clone, PartialEq)]
pub struct DclStatement {
    /// The change; a password in it is still as written.
    pub op: UserOp,
    /// `ON ALL TABLES IN SCHEMA public`: the grant's tables are every table now.
    pub all_tables: bool,
    /// The command tag (`CREATE ROLE`, `GRANT`, …).
    pub tag: &'static str,
}

/// Whether the statement starting with `first`, `second` is one of ours.
pub(crate) fn starts_dcl(first: &Token, second: &Token) -> bool {
    let kw = |t: &Token, k: Keyword| matches!(t, Token::Word(w) if w.keyword == k && w.quote_style.is_none());
    let user_or_role = kw(second, Keyword::USER) || kw(second, Keyword::ROLE);
    ((kw(first, Keyword::CREATE) || kw(first, Keyword::ALTER) || kw(first, Keyword::DROP))
        && user_or_role)
        || kw(first, Keyword::GRANT)
        || kw(first, Keyword::REVOKE)
}

fn name_of(id: &Ident) -> String {
    if id.quote_style.is_some() {
        id.value.clone()
    } else {
        id.value.to_lowercase()
    }
}

/// Parses one user or privilege statement (REQUIRES: [`starts_dcl`] said so).
pub(crate) fn parse_dcl(p: &mut Parser<'_>) -> Result<DclStatement, ParseError> {
    if p.parse_keyword(Keyword::GRANT) {
        return parse_grant(p, false);
    }
    if p.parse_keyword(Keyword::REVOKE) {
        return parse_grant(p, true);
    }
    let verb = p.expect_one_of_keywords(&[Keyword::CREATE, Keyword::ALTER, Keyword::DROP])?;
    p.expect_one_of_keywords(&[Keyword::USER, Keyword::ROLE])?;
    match verb {
        Keyword::DROP => {
            let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
            let names = p.parse_comma_separated(|p| p.parse_identifier())?;
            if names.len() != 1 {
                return Err(ParseError::unsupported(
                    "drop one user per DROP USER statement",
                ));
            }
            Ok(DclStatement {
                op: UserOp::Drop {
                    name: name_of(&names[0]),
                    if_exists,
                },
                all_tables: false,
                tag: "DROP ROLE",
            })
        }
        Keyword::CREATE => {
            let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
            let name = name_of(&p.parse_identifier()?);
            let o = parse_role_options(p)?;
            Ok(DclStatement {
                op: UserOp::Create {
                    name,
                    password: o.password.flatten(),
                    superuser: o.superuser.unwrap_or(false),
                    create: o.create.unwrap_or(false),
                    if_not_exists,
                },
                all_tables: false,
                tag: "CREATE ROLE",
            })
        }
        _ => {
            let name = name_of(&p.parse_identifier()?);
            if p.parse_keyword(Keyword::RENAME) {
                return Err(ParseError::unsupported(
                    "renaming users is not supported: create a new user and drop the old one",
                ));
            }
            let o = parse_role_options(p)?;
            Ok(DclStatement {
                op: UserOp::Alter {
                    name,
                    password: o.password,
                    superuser: o.superuser,
                    create: o.create,
                },
                all_tables: false,
                tag: "ALTER ROLE",
            })
        }
    }
}

#[derive(Default)]
struct RoleOptions {
    password: Option<Option<String>>,
    superuser: Option<bool>,
    create: Option<bool>,
}

fn parse_role_options(p: &mut Parser<'_>) -> Result<RoleOptions, ParseError> {
    let _ = p.parse_keyword(Keyword::WITH);
    let mut o = RoleOptions::default();
    loop {
        let t = p.peek_token().token;
        let word = match &t {
            Token::Word(w) if w.quote_style.is_none() => w.value.to_ascii_uppercase(),
            Token::EOF | Token::SemiColon => break,
            other => {
                return Err(ParseError::syntax(format!(
                    "unexpected {other} in the user's options"
                )));
            }
        };
        p.next_token();
        match word.as_str() {
            "PASSWORD" => {
                o.password = Some(if p.parse_keyword(Keyword::NULL) {
                    None
                } else {
                    Some(p.parse_literal_string()?)
                });
            }
            "ENCRYPTED" => {}
            "SUPERUSER" => o.superuser = Some(true),
            "NOSUPERUSER" => o.superuser = Some(false),
            "CREATEDB" => o.create = Some(true),
            "NOCREATEDB" => o.create = Some(false),
            // Every user may log in; roles are not groups.
            "LOGIN" | "INHERIT" | "NOCREATEROLE" | "NOREPLICATION" | "NOBYPASSRLS" => {}
            other => {
                return Err(ParseError::unsupported(format!(
                    "the user option {other} is not supported: Cairn users take PASSWORD, \
                     SUPERUSER, NOSUPERUSER, CREATEDB and NOCREATEDB"
                )));
            }
        }
    }
    Ok(o)
}

fn parse_grant(p: &mut Parser<'_>, revoke: bool) -> Result<DclStatement, ParseError> {
    let tag = if revoke { "REVOKE" } else { "GRANT" };
    if revoke && p.parse_keywords(&[Keyword::GRANT, Keyword::OPTION, Keyword::FOR]) {
        return Err(ParseError::unsupported("grant options are not supported"));
    }
    // The privileges.
    let mut privileges = Privileges::NONE;
    let mut create = false;
    if p.parse_keyword(Keyword::ALL) {
        let _ = p.parse_keyword(Keyword::PRIVILEGES);
        privileges = Privileges::ALL;
    } else {
        loop {
            let t = p.next_token().token;
            let word = match &t {
                Token::Word(w) => w.value.to_ascii_uppercase(),
                other => {
                    return Err(ParseError::syntax(format!(
                        "expected a privilege, found {other}"
                    )));
                }
            };
            if word == "CREATE" {
                create = true;
            } else if let Some(pr) = Privileges::parse(&word) {
                privileges = privileges.union(pr);
            } else {
                return Err(ParseError::unsupported(format!(
                    "the privilege {word} is not supported: Cairn grants SELECT, INSERT, \
                     UPDATE, DELETE, ALL on tables and CREATE on the database or schema \
                     (GRANT role TO user is not supported: there are no groups)"
                )));
            }
            if !p.consume_token(&Token::Comma) {
                break;
            }
        }
    }
    p.expect_keyword_is(Keyword::ON)?;
    let mut tables = vec![];
    let mut all_tables = false;
    if p.parse_keyword(Keyword::DATABASE) || p.parse_keyword(Keyword::SCHEMA) {
        let _ = p.parse_identifier()?;
        if !privileges.is_empty() && privileges != Privileges::ALL {
            return Err(ParseError::unsupported(
                "on a database or schema only CREATE (or ALL) can be granted",
            ));
        }
        privileges = Privileges::NONE;
        create = true;
    } else {
        if create {
            return Err(ParseError::unsupported(
                "CREATE is granted on the database or schema: GRANT CREATE ON SCHEMA public TO …",
            ));
        }
        if p.parse_keywords(&[Keyword::ALL, Keyword::TABLES, Keyword::IN, Keyword::SCHEMA]) {
            let schema = name_of(&p.parse_identifier()?);
            if schema != "public" {
                return Err(ParseError::unsupported(format!(
                    "schema {schema}: Cairn tables live in schema public"
                )));
            }
            all_tables = true;
        } else {
            let _ = p.parse_keyword(Keyword::TABLE);
            tables = p
                .parse_comma_separated(|p| p.parse_object_name(false))?
                .iter()
                .map(crate::parser::table_name)
                .collect::<Result<Vec<_>, _>>()?;
        }
    }
    p.expect_keyword_is(if revoke { Keyword::FROM } else { Keyword::TO })?;
    let users: Vec<String> = p
        .parse_comma_separated(|p| p.parse_identifier())?
        .iter()
        .map(name_of)
        .collect();
    if p.parse_keywords(&[Keyword::WITH, Keyword::GRANT, Keyword::OPTION]) {
        return Err(ParseError::unsupported(
            "WITH GRANT OPTION is not supported: only superusers grant",
        ));
    }
    let _ = p.parse_keyword(Keyword::CASCADE) || p.parse_keyword(Keyword::RESTRICT);
    Ok(DclStatement {
        op: UserOp::Grant {
            users,
            tables,
            privileges,
            create,
            revoke,
        },
        all_tables,
        tag,
    })
}

/// A password as written in SQL, as the verifier to store.
fn verifier_of(password: &str) -> Result<String> {
    if password.starts_with("SCRAM-SHA-256$") {
        return ScramVerifier::parse(password)
            .map(|v| v.to_string())
            .ok_or_else(|| SqlError::other("22023", "malformed SCRAM-SHA-256 verifier"));
    }
    if password.len() == 35 && password.starts_with("md5") {
        return Err(SqlError::other(
            "0A000",
            "MD5 passwords are not supported: Cairn stores SCRAM-SHA-256 verifiers (set \
             password_encryption to scram-sha-256 in the client)",
        ));
    }
    if password.is_empty() {
        return Err(SqlError::other("22023", "an empty password is not allowed"));
    }
    Ok(ScramVerifier::from_password(password)?.to_string())
}

impl crate::session::SqlSession {
    /// Carries out a user or privilege statement (the master applies it).
    pub(crate) async fn run_dcl(&self, mut dcl: DclStatement) -> Result<crate::QueryResult> {
        let who = self.principal().await?;
        check_user_op(&who, &dcl.op)?;
        match &mut dcl.op {
            UserOp::Create {
                password: Some(p), ..
            } => *p = verifier_of(p)?,
            UserOp::Alter {
                password: Some(Some(p)),
                ..
            } => *p = verifier_of(p)?,
            UserOp::Grant { tables, .. } if dcl.all_tables => {
                *tables = self
                    .engine()
                    .client()
                    .list_tables()
                    .await?
                    .into_iter()
                    .map(|t| t.name)
                    .collect();
            }
            _ => {}
        }
        let client = self.engine().client();
        client.user_ddl(&dcl.op).await.map_err(|e| match e {
            cairn_client::ClientError::InvalidArgument(m) if m.contains("does not exist") => {
                SqlError::other("42704", m)
            }
            cairn_client::ClientError::InvalidArgument(m) if m.contains("already exists") => {
                SqlError::other("42710", m)
            }
            cairn_client::ClientError::InvalidArgument(m) if m.contains("cannot be dropped") => {
                SqlError::other("2BP01", m)
            }
            other => other.into(),
        })?;
        self.engine().users().invalidate();
        Ok(crate::QueryResult::Done {
            tag: dcl.tag.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::{CairnStatement, parse_sql};

    fn dcl(sql: &str) -> DclStatement {
        match parse_sql(sql).unwrap().pop().unwrap() {
            CairnStatement::Dcl(d) => d,
            other => panic!("{sql}: {other:?}"),
        }
    }

    #[test]
    fn user_statements_parse_as_postgresql_writes_them() {
        assert_eq!(
            dcl("CREATE USER Ann WITH PASSWORD 'pw' SUPERUSER LOGIN").op,
            UserOp::Create {
                name: "ann".into(),
                password: Some("pw".into()),
                superuser: true,
                create: false,
                if_not_exists: false
            }
        );
        assert_eq!(
            dcl("ALTER ROLE \"Bob\" PASSWORD NULL NOCREATEDB").op,
            UserOp::Alter {
                name: "Bob".into(),
                password: Some(None),
                superuser: None,
                create: Some(false)
            }
        );
        assert_eq!(
            dcl("GRANT SELECT, insert ON TABLE public.t1, t2 TO ann, bob").op,
            UserOp::Grant {
                users: vec!["ann".into(), "bob".into()],
                tables: vec!["t1".into(), "t2".into()],
                privileges: Privileges::SELECT.union(Privileges::INSERT),
                create: false,
                revoke: false
            }
        );
        let all = dcl("REVOKE ALL PRIVILEGES ON ALL TABLES IN SCHEMA public FROM ann");
        assert!(all.all_tables && all.tag == "REVOKE");
        assert!(matches!(
            dcl("GRANT CREATE ON SCHEMA public TO ann").op,
            UserOp::Grant {
                create: true,
                privileges: Privileges::NONE,
                ..
            }
        ));
        for bad in [
            "GRANT TRUNCATE ON t TO ann",
            "GRANT SELECT ON t TO ann WITH GRANT OPTION",
            "CREATE USER ann VALID UNTIL 'infinity'",
            "GRANT admins TO ann",
        ] {
            assert!(parse_sql(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_become_verifiers() {
        let v = verifier_of("pw").unwrap();
        assert!(ScramVerifier::parse(&v).unwrap().check_password("pw"));
        assert_eq!(verifier_of(&v).unwrap(), v, "a verifier is kept");
        assert!(verifier_of("md5d41d8cd98f00b204e9800998ecf8427e").is_err());
        assert!(verifier_of("").is_err());
    }
}
