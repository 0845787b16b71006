//! `ALTER TABLE t <op>, <op>, …` (columns, range partitions, subspaces) and `DROP TABLE`.

use datafusion::sql::sqlparser::keywords::Keyword;
use datafusion::sql::sqlparser::parser::Parser;
use datafusion::sql::sqlparser::tokenizer::Token;

use super::create_table::{column_def, parse_range_partition};
use super::{
    CairnStatement, ColumnDef, ParseError, RangeBounds, SubspaceClause, found, ident_name,
    is_keyword, is_word, parse_table_name, subspace, table_name,
};

/// One operation of `ALTER TABLE`.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum AlterColumn {
    /// `ADD [COLUMN] [IF NOT EXISTS] c type [NULL|NOT NULL] [DEFAULT lit]`.
    Add {
        /// The new column.
        column: ColumnDef,
        /// `IF NOT EXISTS`: an existing column of that name is not an error.
        if_not_exists: bool,
    },
    /// `DROP [COLUMN] [IF EXISTS] c`.
    Drop {
        /// The column.
        name: String,
        /// `IF EXISTS`: a missing column is not an error.
        if_exists: bool,
    },
    /// `RENAME [COLUMN] a TO b`.
    Rename {
        /// Current name.
        from: String,
        /// New name.
        to: String,
    },
    /// `ADD RANGE PARTITION lower <= VALUES < upper` (or `VALUE = x`).
    AddRangePartition {
        /// Lower (inclusive) and upper (exclusive) bound, as in [`RangeBounds`].
        bounds: RangeBounds,
    },
    /// `DROP RANGE PARTITION lower <= VALUES < upper` (or `VALUE = x`).
    DropRangePartition {
        /// Lower (inclusive) and upper (exclusive) bound, as in [`RangeBounds`].
        bounds: RangeBounds,
    },
    /// `ADD SUBSPACE (a, b) [REGIONS n] [TABLETS t]`: hyperspace search on `a, b`.
    AddSubspace {
        /// Attributes, regions and tablets.
        subspace: SubspaceClause,
    },
    /// `DROP SUBSPACE [IF EXISTS] name` (or `(a, b)`, its default name).
    DropSubspace {
        /// The subspace's name.
        name: String,
        /// `IF EXISTS`: a missing subspace is not an error.
        if_exists: bool,
    },
}

pub(super) fn parse_drop_table(p: &mut Parser<'_>) -> Result<CairnStatement, ParseError> {
    p.expect_keyword_is(Keyword::DROP)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
    let names = p
        .parse_comma_separated(|p| p.parse_object_name(false))?
        .iter()
        .map(table_name)
        .collect::<Result<Vec<_>, _>>()?;
    if p.parse_keyword(Keyword::CASCADE) {
        return Err(ParseError::unsupported(
            "DROP TABLE ... CASCADE is not supported: Cairn tables have no dependent objects, drop without CASCADE",
        ));
    }
    let _ = p.parse_keyword(Keyword::RESTRICT);
    Ok(CairnStatement::DropTable { names, if_exists })
}

pub(super) fn parse_alter_table(p: &mut Parser<'_>) -> Result<CairnStatement, ParseError> {
    p.expect_keyword_is(Keyword::ALTER)?;
    p.expect_keyword_is(Keyword::TABLE)?;
    if p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]) {
        return Err(ParseError::unsupported(
            "ALTER TABLE IF EXISTS is not supported: check that the table exists and run ALTER TABLE without IF EXISTS",
        ));
    }
    let _ = p.parse_keyword(Keyword::ONLY);
    let name = parse_table_name(p)?;
    let mut ops = vec![alter_op(p)?];
    while p.consume_token(&Token::Comma) {
        ops.push(alter_op(p)?);
    }
    Ok(CairnStatement::AlterTable { name, ops })
}

fn alter_op(p: &mut Parser<'_>) -> Result<AlterColumn, ParseError> {
    const HELP: &str = "ALTER TABLE supports ADD [COLUMN] c type [NULL|NOT NULL] [DEFAULT lit], DROP [COLUMN] c, RENAME [COLUMN] a TO b, ADD RANGE PARTITION ..., DROP RANGE PARTITION ..., ADD SUBSPACE (a, ...) [REGIONS n] [TABLETS t] and DROP SUBSPACE name";
    if p.parse_keyword(Keyword::ADD) {
        if p.parse_keywords(&[Keyword::RANGE, Keyword::PARTITION]) {
            return Ok(AlterColumn::AddRangePartition {
                bounds: parse_range_partition(p)?,
            });
        }
        if is_word(&p.peek_token().token, "SUBSPACE") {
            p.next_token();
            return Ok(AlterColumn::AddSubspace {
                subspace: subspace::parse_subspace_clause(p)?,
            });
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let if_not_exists = p.parse_keywords(&[Keyword::IF, Keyword::NOT, Keyword::EXISTS]);
        let t = p.peek_token().token;
        if is_keyword(&t, Keyword::PRIMARY)
            || is_keyword(&t, Keyword::CONSTRAINT)
            || is_keyword(&t, Keyword::UNIQUE)
        {
            return Err(ParseError::unsupported(format!(
                "adding constraints is not supported: {HELP}"
            )));
        }
        let c = p.parse_column_def()?;
        let (column, pk) = column_def(&c)?;
        if pk {
            return Err(ParseError::unsupported(format!(
                "the primary key of a table cannot change, so column '{}' cannot be added as PRIMARY KEY",
                column.name
            )));
        }
        return Ok(AlterColumn::Add {
            column,
            if_not_exists,
        });
    }
    if p.parse_keyword(Keyword::DROP) {
        if p.parse_keywords(&[Keyword::RANGE, Keyword::PARTITION]) {
            return Ok(AlterColumn::DropRangePartition {
                bounds: parse_range_partition(p)?,
            });
        }
        if is_word(&p.peek_token().token, "SUBSPACE") {
            p.next_token();
            let (name, if_exists) = subspace::parse_drop_subspace(p)?;
            return Ok(AlterColumn::DropSubspace { name, if_exists });
        }
        let t = p.peek_token().token;
        if is_keyword(&t, Keyword::CONSTRAINT) || is_keyword(&t, Keyword::PRIMARY) {
            return Err(ParseError::unsupported(format!(
                "dropping constraints is not supported: {HELP}"
            )));
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let if_exists = p.parse_keywords(&[Keyword::IF, Keyword::EXISTS]);
        let name = ident_name(&p.parse_identifier()?);
        if p.parse_keyword(Keyword::CASCADE) {
            return Err(ParseError::unsupported(
                "DROP COLUMN ... CASCADE is not supported: drop without CASCADE",
            ));
        }
        let _ = p.parse_keyword(Keyword::RESTRICT);
        return Ok(AlterColumn::Drop { name, if_exists });
    }
    if p.parse_keyword(Keyword::RENAME) {
        if p.parse_keyword(Keyword::TO) {
            return Err(ParseError::unsupported(format!(
                "renaming a table is not supported: {HELP}"
            )));
        }
        let _ = p.parse_keyword(Keyword::COLUMN);
        let from = ident_name(&p.parse_identifier()?);
        p.expect_keyword_is(Keyword::TO)?;
        let to = ident_name(&p.parse_identifier()?);
        return Ok(AlterColumn::Rename { from, to });
    }
    Err(ParseError::unsupported(format!(
        "unsupported ALTER TABLE operation: found {}; {HELP}",
        found(p)
    )))
}

#[cfg(test)]
mod tests {
    use super::super::tests::{bounds_str, err, lit, one};
    use super::*;
    use datafusion::sql::sqlparser::ast::DataType;

    #[test]
    fn drop_table() {
        assert_eq!(
            one("DROP TABLE a, B"),
            CairnStatement::DropTable {
                names: vec!["a".into(), "b".into()],
                if_exists: false
            }
        );
        assert_eq!(
            one("drop table if exists \"X\" restrict"),
            CairnStatement::DropTable {
                names: vec!["X".into()],
                if_exists: true
            }
        );
        assert_eq!(err("DROP TABLE a CASCADE").sqlstate(), "0A000");
        // Other DROPs go to DataFusion.
        assert!(matches!(one("DROP VIEW v"), CairnStatement::Query { .. }));
    }

    #[test]
    fn alter_table() {
        let s = one(
            "ALTER TABLE T ADD COLUMN IF NOT EXISTS x INT NOT NULL DEFAULT 0, ADD y TEXT, DROP COLUMN z, DROP IF EXISTS w, RENAME COLUMN a TO B, RENAME c TO d",
        );
        let CairnStatement::AlterTable { name, ops } = s else {
            panic!("{s:?}")
        };
        assert_eq!(name, "t");
        assert_eq!(ops.len(), 6);
        match &ops[0] {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                assert!(*if_not_exists);
                assert_eq!(column.name, "x");
                assert!(!column.nullable);
                assert_eq!(column.default.as_ref().map(lit).as_deref(), Some("0"));
            }
            other => panic!("{other:?}"),
        }
        match &ops[1] {
            AlterColumn::Add {
                column,
                if_not_exists,
            } => {
                assert!(!*if_not_exists);
                assert!(column.nullable);
                assert_eq!(column.data_type, DataType::Text);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ops[2],
            AlterColumn::Drop {
                name: "z".into(),
                if_exists: false
            }
        );
        assert_eq!(
            ops[3],
            AlterColumn::Drop {
                name: "w".into(),
                if_exists: true
            }
        );
        assert_eq!(
            ops[4],
            AlterColumn::Rename {
                from: "a".into(),
                to: "b".into()
            }
        );
        assert_eq!(
            ops[5],
            AlterColumn::Rename {
                from: "c".into(),
                to: "d".into()
            }
        );
    }

    #[test]
    fn alter_table_range_partitions() {
        let CairnStatement::AlterTable { ops, .. } = one(
            "ALTER TABLE t ADD RANGE PARTITION 10 <= VALUES < 20, DROP RANGE PARTITION VALUES < 10, ADD RANGE PARTITION VALUE = 7",
        ) else {
            panic!()
        };
        match &ops[0] {
            AlterColumn::AddRangePartition { bounds } => assert_eq!(
                bounds_str(bounds),
                (Some(vec!["10".into()]), Some(vec!["20".into()]))
            ),
            other => panic!("{other:?}"),
        }
        match &ops[1] {
            AlterColumn::DropRangePartition { bounds } => {
                assert_eq!(bounds_str(bounds), (None, Some(vec!["10".into()])))
            }
            other => panic!("{other:?}"),
        }
        match &ops[2] {
            AlterColumn::AddRangePartition { bounds } => assert_eq!(
                bounds_str(bounds),
                (Some(vec!["7".into()]), Some(vec!["7".into()]))
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn alter_table_errors() {
        assert_eq!(err("ALTER TABLE t RENAME TO u").sqlstate(), "0A000");
        assert_eq!(
            err("ALTER TABLE t ALTER COLUMN a SET DEFAULT 1").sqlstate(),
            "0A000"
        );
        assert_eq!(
            err("ALTER TABLE t ADD COLUMN k INT PRIMARY KEY").sqlstate(),
            "0A000"
        );
        assert_eq!(err("ALTER TABLE IF EXISTS t DROP a").sqlstate(), "0A000");
        let e = err("ALTER TABLE t ADD COLUMN");
        assert_eq!(e.sqlstate(), "42601");
    }
}
