//! Landed migrations never change. sqlx refuses to start on a database whose applied
//! migration differs from the embedded one, and a fresh database built from an edited
//! migration differs from one an earlier Warden migrated; either way nobody would know
//! until an operator upgrades. `migrations/landed.sha256` records each file's SHA-256 as
//! it landed: an edited file, a file without its line, or a line without its file fails
//! here. A new migration adds its line (`sha256sum sqlite/NNNN_*.sql postgres/NNNN_*.sql`).

use std::collections::BTreeMap;
use std::path::Path;

use sha2::{Digest, Sha256};

fn recorded(root: &Path) -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(root.join("landed.sha256")).expect("landed.sha256");
    text.lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (sum, file) = line.split_once("  ").expect("`<sha256>  <file>` lines");
            (file.to_owned(), sum.to_owned())
        })
        .collect()
}

fn on_disk(root: &Path) -> BTreeMap<String, String> {
    let mut found = BTreeMap::new();
    for backend in ["sqlite", "postgres"] {
        for entry in std::fs::read_dir(root.join(backend)).expect("a migrations folder") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "sql") {
                let bytes = std::fs::read(&path).expect("a migration");
                let sum = warden_shared::keys::hex(&Sha256::digest(&bytes));
                let name = path.file_name().and_then(|n| n.to_str()).expect("a name");
                found.insert(format!("{backend}/{name}"), sum);
            }
        }
    }
    found
}

#[test]
fn landed_migrations_are_unchanged_and_each_is_recorded() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    let (recorded, on_disk) = (recorded(&root), on_disk(&root));
    let mut wrong = Vec::new();
    for (file, sum) in &on_disk {
        match recorded.get(file) {
            None => wrong.push(format!("{file}: not in landed.sha256 (add its line)")),
            Some(landed) if landed != sum => wrong.push(format!(
                "{file}: changed after it landed; add a new migration instead"
            )),
            Some(_) => {}
        }
    }
    for file in recorded.keys().filter(|file| !on_disk.contains_key(*file)) {
        wrong.push(format!("{file}: recorded but gone"));
    }
    assert!(wrong.is_empty(), "{wrong:#?}");
}
