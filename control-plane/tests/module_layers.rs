//! The control plane's modules form layers at every level: no module reaches (through
//! `crate::` or `super::` paths, in any of its files, tests included) a sibling module
//! that reaches back to it, whether they are top-level modules (`state`, `changes`,
//! `api`), resources of the API (`api::cost`, `api::teams`) or files of one resource
//! (`api::auth::keys`, `api::auth::service`). This test fails naming every cycle, and
//! prints the top-level layers (each module above everything it uses). The scan is the
//! proxy's (`proxy/tests/module_scan`).

#[path = "../../proxy/tests/module_scan/mod.rs"]
mod module_scan;

use std::path::Path;

use module_scan::{layers, read_sources, sibling_graphs};

#[test]
fn control_plane_modules_have_no_cycles_at_any_level() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let files = read_sources(&src).expect("control-plane/src is readable");
    let graphs = sibling_graphs(&files);
    assert!(graphs.len() > 20, "too few modules found: {}", graphs.len());
    let mut knots = Vec::new();
    for (parent, graph) in &graphs {
        let within = if parent.is_empty() {
            "the crate".to_owned()
        } else {
            parent.join("::")
        };
        match layers(graph) {
            Ok(layers) if parent.is_empty() => {
                println!("control-plane module layers, bottom first:");
                for (index, layer) in layers.iter().enumerate() {
                    println!("  {index}: {}", layer.join(", "));
                }
            }
            Ok(_) => {}
            Err(cycles) => knots.extend(cycles.into_iter().map(|c| format!("in {within}: {c}"))),
        }
    }
    assert!(
        knots.is_empty(),
        "control-plane modules refer to each other in cycles; move the shared piece into a \
         module below both:\n  {}",
        knots.join("\n  ")
    );
}
