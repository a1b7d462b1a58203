//! The proxy's top-level modules form layers: none reaches (through `crate::` or
//! `super::` paths, in any of its files, tests included) a module that reaches back to
//! it. A cycle is what lets a request path grow into one tangle that nothing can be
//! read or tested apart from; this test fails naming it, and prints the layers it found
//! (each module above everything it uses).
//!
//! The scan (`module_scan`, shared with the control plane's test) reads the source, not
//! the compiler's view.

mod module_scan;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use module_scan::{layers, read_sources, sibling_graphs, Graph};

#[test]
fn proxy_modules_have_no_cycles_between_them() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&src).expect("proxy/src is readable");
    let graph = graph_of(&files);
    assert!(graph.len() > 10, "too few modules found: {graph:?}");
    match layers(&graph) {
        Ok(layers) => {
            println!("proxy module layers, bottom first:");
            for (index, layer) in layers.iter().enumerate() {
                println!("  {index}: {}", layer.join(", "));
            }
        }
        Err(cycles) => panic!(
            "proxy modules refer to each other in a cycle; move the shared piece into a \
             module below both:\n  {}",
            cycles.join("\n  ")
        ),
    }
}

#[test]
fn the_scan_finds_a_cycle_and_ignores_comments_strings_and_own_submodules() {
    let files = vec![
        (
            PathBuf::from("a.rs"),
            "use crate::{b::Thing, c};\n// crate::d\nconst S: &str = \"crate::d\";\n\
             const R: &str = r#\"crate::d \"quoted\"\"#;\nconst C: char = '\"';\n\
             fn f<'x>(_: &'x str) {}\n#[cfg(test)]\nmod tests { use super::super::e::X; }"
                .to_owned(),
        ),
        (
            PathBuf::from("b.rs"),
            "pub(crate) fn g() { crate::c::h(); }".to_owned(),
        ),
        (
            PathBuf::from("c/mod.rs"),
            "mod inner;\npub(crate) fn h() {}".to_owned(),
        ),
        (
            PathBuf::from("c/inner.rs"),
            "use super::h;\nuse super::super::a::f;".to_owned(),
        ),
        (PathBuf::from("d.rs"), String::new()),
        (
            PathBuf::from("e.rs"),
            "/* crate::a /* nested */ crate::b */".to_owned(),
        ),
    ];
    let graph = graph_of(&files);
    let edges = |module: &str| -> Vec<&str> { graph[module].iter().map(String::as_str).collect() };
    assert_eq!(edges("a"), ["b", "c", "e"]);
    assert_eq!(edges("b"), ["c"]);
    assert_eq!(edges("c"), ["a"]);
    assert!(edges("d").is_empty() && edges("e").is_empty());
    // One cycle through each module caught in one; b is in the longer one.
    let cycles = layers(&graph).expect_err("a and c use each other");
    assert_eq!(cycles, ["a -> c -> a", "b -> c -> a -> b"]);

    let mut acyclic = graph.clone();
    acyclic.insert("c".into(), BTreeSet::new());
    let layers = layers(&acyclic).expect("no cycle once c stops using a");
    assert_eq!(layers, [vec!["c", "d", "e"], vec!["b"], vec!["a"]]);
}

/// The top-level modules and which of the others each one refers to. The crate root
/// only declares and re-exports them, so it is left out.
fn graph_of(files: &[(PathBuf, String)]) -> Graph {
    sibling_graphs(files)
        .remove(&Vec::new())
        .unwrap_or_default()
}
