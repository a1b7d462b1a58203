//! The management API keeps its SQL in its resources' stores (ARCHITECTURE.md, "The
//! resource pattern"): under `control-plane/src/api/`, only a `store.rs` file, or a file
//! under a `store/` folder, may build an sqlx query. This test fails naming every other
//! file and line that does. Comments and string literals are left out by the proxy's
//! scan (`proxy/tests/module_scan`), so a doc comment may still name `sqlx::query`.

#[path = "../../proxy/tests/module_scan/mod.rs"]
mod module_scan;

use std::path::Path;

use module_scan::{code_only, read_sources};

/// What builds or runs a query, as written in code without white space: sqlx's query
/// functions (`query`, `query_as`, `query_scalar`, `query_with`, ..., and the macros),
/// raw SQL, the query builder, and an executor given SQL text directly (a string
/// literal, which the scan empties to `""`).
const QUERY_MARKERS: &[&str] = &[
    "sqlx::query",
    "sqlx::raw_sql",
    "QueryBuilder",
    ".execute(\"\"",
    ".execute_many(\"\"",
    ".fetch(\"\"",
    ".fetch_all(\"\"",
    ".fetch_one(\"\"",
    ".fetch_optional(\"\"",
    ".fetch_many(\"\"",
];

/// Whether `file` (relative to `src/api`) may hold SQL: it is a store.
fn is_store(file: &Path) -> bool {
    file.file_name().is_some_and(|name| name == "store.rs")
        || file
            .parent()
            .is_some_and(|folder| folder.iter().any(|part| part == "store"))
}

/// How many query markers `code` (comments and strings blanked) holds, counting each
/// query function a `use sqlx::{..}` group brings in under its own name.
fn markers(code: &str) -> usize {
    let compact: String = code.chars().filter(|c| !c.is_whitespace()).collect();
    let direct: usize = QUERY_MARKERS
        .iter()
        .map(|marker| compact.matches(marker).count())
        .sum();
    let grouped: usize = compact
        .split("sqlx::{")
        .skip(1)
        .map(|group| {
            group
                .split('}')
                .next()
                .unwrap_or_default()
                .split([',', '{'])
                .filter(|item| item.starts_with("query") || item.starts_with("raw_sql"))
                .count()
        })
        .sum();
    direct + grouped
}

/// The 1-based numbers of the lines of `text` that hold a query marker in code: those
/// where the code up to the line's end holds more markers than the code before it (so
/// that a string or comment spanning lines is never mistaken for code). Quadratic in
/// the file's length, so run only on the files that break the rule.
fn query_lines(text: &str) -> Vec<usize> {
    let mut lines = Vec::new();
    let mut end = 0;
    let mut before = 0;
    for (index, line) in text.split_inclusive('\n').enumerate() {
        end += line.len();
        let through = markers(&code_only(&text[..end]));
        if through > before {
            lines.push(index + 1);
        }
        before = through;
    }
    lines
}

#[test]
fn api_sql_lives_only_in_store_files() {
    let api = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
    let files = read_sources(&api).expect("control-plane/src/api is readable");
    assert!(files.len() > 50, "too few API files found: {}", files.len());
    let mut stores = 0;
    let mut outside: Vec<(String, Option<usize>)> = Vec::new();
    for (file, text) in &files {
        if markers(&code_only(text)) == 0 {
            continue;
        }
        if is_store(file) {
            stores += 1;
            continue;
        }
        let name = format!("src/api/{}", file.display());
        let lines = query_lines(text);
        if lines.is_empty() {
            outside.push((name, None));
        } else {
            outside.extend(lines.into_iter().map(|line| (name.clone(), Some(line))));
        }
    }
    assert!(stores > 20, "too few stores with SQL found: {stores}");
    outside.sort();
    let outside: Vec<String> = outside
        .into_iter()
        .map(|(name, line)| match line {
            Some(line) => format!("{name}:{line}"),
            None => name,
        })
        .collect();
    assert!(
        outside.is_empty(),
        "SQL outside a store: move each query into a function of its resource's store.rs \
         (rows in, rows out, every statement filtered by tenant) and call that:\n  {}",
        outside.join("\n  ")
    );
}

/// The console renders what the API's services return: it has no SQL at all, not even
/// in a store of its own (ARCHITECTURE.md, the console's invariant).
#[test]
fn the_console_runs_no_sql() {
    let console = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/console");
    let files = read_sources(&console).expect("control-plane/src/console is readable");
    assert!(
        files.len() > 5,
        "too few console files found: {}",
        files.len()
    );
    let with_sql: Vec<String> = files
        .iter()
        .filter(|(_, text)| markers(&code_only(text)) > 0)
        .map(|(file, text)| {
            format!(
                "src/console/{} lines {:?}",
                file.display(),
                query_lines(text)
            )
        })
        .collect();
    assert!(
        with_sql.is_empty(),
        "the console calls the API's services, never SQL of its own:\n  {}",
        with_sql.join("\n  ")
    );
}

#[test]
fn the_scan_finds_queries_in_code_only() {
    let text = "// sqlx::query(\"in a comment\")\n\
                let q = \"sqlx::query in a string\";\n\
                let rows = sqlx::query_as(\n\
                    \"SELECT a FROM t \\\n\
                     WHERE sqlx::query = 1\",\n\
                )\n\
                .fetch_all(pool);\n\
                let n: i64 = sqlx :: query_scalar(SQL);\n\
                use sqlx::{AnyPool, query};\n\
                use sqlx::{AnyPool, Row};\n\
                pool.execute(\"DELETE FROM t\");\n\
                /* sqlx::query\n\
                   spanning lines */ let m = 1;\n\
                use sqlx::{\n\
                    query_scalar,\n\
                };\n";
    assert_eq!(query_lines(text), vec![3, 8, 9, 11, 15]);
    assert!(is_store(Path::new("teams/store.rs")));
    assert!(is_store(Path::new("cost/store/ledger.rs")));
    assert!(!is_store(Path::new("teams/service.rs")));
    assert!(!is_store(Path::new("restore.rs")));
}
