//! Every write takes its turn among the writers (ARCHITECTURE.md's invariant on
//! `Db::begin_write`): on SQLite a statement run on the pool by itself meets the write
//! lock held and sleeps in the busy handler, which a steady queue of writers starves.
//! This test fails naming each function in `control-plane/src` whose SQL writes
//! (`INSERT`, `UPDATE`, `DELETE`) and runs on the pool rather than on a write
//! transaction. It reads the source as text: a function is what lies between one `fn `
//! and the next, a statement what lies up to a `;`.

#[path = "../../proxy/tests/module_scan/mod.rs"]
mod module_scan;

use std::path::Path;

use module_scan::read_sources;

/// Statement text that writes, as it starts in a string literal.
const WRITES: &[&str] = &["\"INSERT", "\"UPDATE", "\"DELETE"];
/// An executor that is the pool itself, as the source writes it (without white space).
const ON_THE_POOL: &[&str] = &[
    "(pool)",
    "(&pool)",
    "(&self.pool)",
    "(self.pool())",
    "(db.pool())",
    "(self.db.pool())",
    "(state.db.pool())",
];
const EXECUTORS: &[&str] = &[
    ".execute",
    ".fetch_one",
    ".fetch_optional",
    ".fetch_all",
    ".fetch",
];

/// The names of the functions of `source` that write on the pool.
fn writers_on_the_pool(source: &str) -> Vec<String> {
    let mut found = Vec::new();
    for function in source.split("fn ").skip(1) {
        let compact: String = function.chars().filter(|c| !c.is_whitespace()).collect();
        // A statement, up to its `;`, that both holds writing SQL and runs on the pool.
        let writes_on_the_pool = compact.split(';').any(|statement| {
            WRITES.iter().any(|sql| statement.contains(sql))
                && EXECUTORS.iter().any(|executor| {
                    ON_THE_POOL
                        .iter()
                        .any(|pool| statement.contains(&format!("{executor}{pool}")))
                })
        });
        if writes_on_the_pool {
            let name: String = function
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            found.push(name);
        }
    }
    found
}

#[test]
fn every_write_takes_its_turn() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&src).expect("control-plane/src is readable");
    assert!(
        files.len() > 50,
        "too few source files found: {}",
        files.len()
    );
    let mut offenders = Vec::new();
    for (file, source) in files {
        for name in writers_on_the_pool(&source) {
            let shown = file.display().to_string();
            // The test of the turns themselves writes its fixture table on the pool.
            if shown != "db/writers_in_turn.rs" {
                offenders.push(format!("{shown}: fn {name}"));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "these functions write on the pool; take a turn with `Db::begin_write` and run \
         the statement on the transaction:\n  {}",
        offenders.join("\n  ")
    );
}

#[test]
fn the_scan_finds_a_write_on_the_pool_and_passes_one_on_a_transaction() {
    let on_the_pool = r#"
        pub async fn close(pool: &AnyPool, id: &str) -> Result<(), sqlx::Error> {
            sqlx::query("DELETE FROM streams WHERE id = $1").bind(id).execute(pool).await?;
            Ok(())
        }
        fn read(pool: &AnyPool) { sqlx::query("SELECT 1").fetch_one(pool); }
        fn mixed(db: &Db) {
            let ids = sqlx::query("SELECT id FROM t").fetch_all(db.pool()).await?;
            sqlx::query("UPDATE t SET n = 1").execute(db.pool()).await?;
        }
    "#;
    assert_eq!(writers_on_the_pool(on_the_pool), ["close", "mixed"]);
    let in_turn = r#"
        pub async fn close(tx: &mut WriteTx, id: &str) -> Result<(), sqlx::Error> {
            sqlx::query("DELETE FROM streams WHERE id = $1").bind(id).execute(&mut **tx).await?;
            Ok(())
        }
        async fn chain(db: &Db) {
            let ids = sqlx::query("SELECT id FROM t").fetch_all(db.pool()).await?;
            let mut tx = db.begin_write().await?;
            sqlx::query("UPDATE t SET n = 1").execute(&mut *tx).await?;
        }
    "#;
    assert!(writers_on_the_pool(in_turn).is_empty());
}
