//! Multi-row statements on both backends: how many rows fit one statement, their
//! placeholders, and the parameter style each backend binds fastest.
//!
//! The ledger's batches and the proxies' decision batches write thousands of rows a
//! second through these; every piece of SQL they build comes from counts, never input.

use crate::db::WriteTx;

/// Bound parameters per multi-row statement on SQLite. SQLite looks each named
/// parameter (`$N`) up by a linear search of the statement's names, so binding n of them
/// costs n²; bulk statements therefore go to SQLite with anonymous `?` parameters
/// ([`for_backend`]), bound in order at constant cost each, and can be large.
const SQLITE_PARAMS_PER_STATEMENT: usize = 4_800;
/// On PostgreSQL binding is linear and each statement is a round trip, so a 1,000-record
/// batch goes in a handful of statements (the protocol allows 65,535 parameters).
const POSTGRES_PARAMS_PER_STATEMENT: usize = 16_000;

/// How many rows of `columns` bound values fit one statement of `tx`'s backend.
pub fn rows_per_statement(tx: &mut WriteTx, columns: usize) -> usize {
    let params = if is_postgres(tx) {
        POSTGRES_PARAMS_PER_STATEMENT
    } else {
        SQLITE_PARAMS_PER_STATEMENT
    };
    (params / columns).max(1)
}

/// Whether `tx` runs on PostgreSQL (row locks, parameter limits), not SQLite.
pub fn is_postgres(tx: &mut WriteTx) -> bool {
    tx.backend_name() == "PostgreSQL"
}

/// `sql` as `tx`'s backend binds it fastest: on SQLite, a statement whose numbered
/// parameters are `$1` to `$n`, each once and in that order (and before any `?` that
/// [`placeholders`] wrote), gets anonymous `?` instead (bound at constant cost each; see
/// [`SQLITE_PARAMS_PER_STATEMENT`]); anything else is kept as it is, since `?` would
/// then bind values to the wrong places.
pub fn for_backend(tx: &mut WriteTx, sql: String) -> String {
    if is_postgres(tx) {
        return sql;
    }
    anonymous_parameters(&sql).unwrap_or(sql)
}

/// `sql` with `$1`..`$n` (in textual order, each once) replaced by `?`; `None` when the
/// parameters are numbered any other way. Our bulk statements hold no `$` in literals.
fn anonymous_parameters(sql: &str) -> Option<String> {
    let mut out = String::with_capacity(sql.len());
    let mut expected = 1usize;
    let mut rest = sql;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let digits = rest[at + 1..]
            .bytes()
            .take_while(u8::is_ascii_digit)
            .count();
        let number: usize = rest[at + 1..at + 1 + digits].parse().ok()?;
        if number != expected {
            return None;
        }
        expected += 1;
        out.push('?');
        rest = &rest[at + 1 + digits..];
    }
    out.push_str(rest);
    Some(out)
}

/// The rows of a bulk statement's parameters, `($first, ...), (...)`, built from counts,
/// never from input. They must be the statement's last parameters: on SQLite they are
/// written as anonymous `?` straight away, one row repeated (a batch's statements hold
/// thousands, and numbering each and then rewriting it cost a few percent of the
/// control plane), and [`for_backend`] turns the parameters before them, `$1` to
/// `$first - 1`, into `?` as well.
pub fn placeholders(tx: &mut WriteTx, rows: usize, columns: usize, first: usize) -> String {
    if is_postgres(tx) {
        numbered_placeholders(rows, columns, first)
    } else {
        anonymous_placeholders(rows, columns)
    }
}

/// `values` as one JSON array of strings: a list bound as one parameter on PostgreSQL
/// (`json_array_elements_text($n::json)`), whose `Any` driver binds no arrays.
pub fn json_array(values: &[&str]) -> String {
    serde_json::to_string(values).unwrap_or_else(|_| "[]".to_owned())
}

/// `($1, $2, ...), ($n+1, ...)`, numbered from `first`.
fn numbered_placeholders(rows: usize, columns: usize, first: usize) -> String {
    use std::fmt::Write;
    let mut sql = String::with_capacity(rows * columns * 7);
    for row in 0..rows {
        if row > 0 {
            sql.push_str(", ");
        }
        sql.push('(');
        for column in 0..columns {
            if column > 0 {
                sql.push_str(", ");
            }
            // Writing to a String cannot fail.
            let _ = write!(sql, "${}", first + row * columns + column);
        }
        sql.push(')');
    }
    sql
}

/// `(?, ?, ...), (?, ...)`.
fn anonymous_placeholders(rows: usize, columns: usize) -> String {
    let row = format!("({})", vec!["?"; columns].join(", "));
    let mut sql = String::with_capacity(rows * (row.len() + 2));
    for index in 0..rows {
        if index > 0 {
            sql.push_str(", ");
        }
        sql.push_str(&row);
    }
    sql
}

#[cfg(test)]
mod tests {
    use super::{anonymous_parameters, anonymous_placeholders, numbered_placeholders};

    #[test]
    fn placeholders_number_rows_after_the_first_parameter() {
        assert_eq!(numbered_placeholders(2, 2, 1), "($1, $2), ($3, $4)");
        assert_eq!(numbered_placeholders(1, 3, 2), "($2, $3, $4)");
        assert_eq!(anonymous_placeholders(2, 3), "(?, ?, ?), (?, ?, ?)");
        // Numbered parameters before anonymous rows become anonymous too, in order.
        assert_eq!(
            anonymous_parameters("x = $1 AND y IN (?, ?)").as_deref(),
            Some("x = ? AND y IN (?, ?)")
        );
        assert_eq!(
            anonymous_parameters("SELECT a FROM t WHERE x = $1 AND y IN ($2, $3)").as_deref(),
            Some("SELECT a FROM t WHERE x = ? AND y IN (?, ?)")
        );
        // Reused or out of order: `?` would bind the wrong values, so it is kept.
        assert_eq!(anonymous_parameters("x = $1 OR y = $1"), None);
        assert_eq!(anonymous_parameters("x = $2 AND y = $1"), None);
        assert_eq!(anonymous_parameters("x = $ AND y = $1"), None);
    }
}
