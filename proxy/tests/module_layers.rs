//! The proxy's top-level modules form layers: none reaches (through `crate::` or
//! `super::` paths, in any of its files, tests included) a module that reaches back to
//! it. A cycle is what lets a request path grow into one tangle that nothing can be
//! read or tested apart from; this test fails naming it, and prints the layers it found
//! (each module above everything it uses).
//!
//! The scan reads the source, not the compiler's view: comments and string literals are
//! blanked first, and `use` groups (`crate::{a, b::c}`) count each module they name.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Each top-level module and the top-level modules it refers to.
type Graph = BTreeMap<String, BTreeSet<String>>;

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

/// Every `.rs` file under `src`, with its path relative to `src`.
fn read_sources(src: &Path) -> io::Result<Vec<(PathBuf, String)>> {
    let mut files = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in fs::read_dir(&folder)? {
            let path = entry?.path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let text = fs::read_to_string(&path)?;
                let relative = path
                    .strip_prefix(src)
                    .map_or(path.clone(), Path::to_path_buf);
                files.push((relative, text));
            }
        }
    }
    Ok(files)
}

/// The module path a file defines: `usage/sink.rs` is `usage::sink`, `usage/mod.rs` is
/// `usage`; `lib.rs` and `main.rs` are the crate root (empty).
fn module_path(file: &Path) -> Vec<String> {
    let mut path: Vec<String> = file
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if matches!(path.last().map(String::as_str), Some("mod")) {
        path.pop();
    }
    if path.len() == 1 && matches!(path[0].as_str(), "lib" | "main") {
        path.clear();
    }
    path
}

/// The top-level modules and which of the others each one refers to. The crate root
/// only declares and re-exports them, so it is left out.
fn graph_of(files: &[(PathBuf, String)]) -> Graph {
    let mut graph = Graph::new();
    for (file, _) in files {
        if let Some(top) = module_path(file).first() {
            graph.entry(top.clone()).or_default();
        }
    }
    for (file, text) in files {
        let path = module_path(file);
        let Some(top) = path.first() else {
            continue;
        };
        let used: BTreeSet<String> = references(&path, &tokens(&code_only(text)))
            .into_iter()
            .filter(|used| used != top && graph.contains_key(used))
            .collect();
        graph.entry(top.clone()).or_default().extend(used);
    }
    graph
}

/// `text` with comments removed and string and character literals emptied, so that
/// only code is searched for paths. Lifetimes (`'a`) stay as they are.
fn code_only(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < chars.len() && chars[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < chars.len() {
                if chars[i] == '/' && chars.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if chars[i] == '*' && chars.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c == 'r'
            && (i == 0
                || !is_ident(chars[i - 1])
                || (chars[i - 1] == 'b' && (i < 2 || !is_ident(chars[i - 2]))))
            && matches!(next, Some('#' | '"'))
            && raw_string_end(&chars, i + 1).is_some()
        {
            i = raw_string_end(&chars, i + 1).unwrap_or(chars.len());
            out.push_str("\"\"");
        } else if c == '"' {
            i += 1;
            while i < chars.len() && chars[i] != '"' {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c == '\'' && next == Some('\\') {
            i += 3;
            while i < chars.len() && chars[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c == '\'' && chars.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// Where the raw string whose hashes (or quote) start at `start` ends: the index after
/// its closing quote and hashes. `None` when `start` does not open one.
fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
    let hashes = chars[start..].iter().take_while(|c| **c == '#').count();
    if chars.get(start + hashes) != Some(&'"') {
        return None;
    }
    let mut i = start + hashes + 1;
    while i < chars.len() {
        if chars[i] == '"'
            && chars[i + 1..]
                .iter()
                .take(hashes)
                .filter(|c| **c == '#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    None
}

/// Identifiers, `::` and single punctuation characters, in order.
fn tokens(code: &str) -> Vec<String> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".to_owned());
            i += 2;
        } else {
            if !c.is_whitespace() {
                tokens.push(c.to_string());
            }
            i += 1;
        }
    }
    tokens
}

/// The top-level modules the code of the file defining module `path` refers to: every
/// `crate::x`, every `crate::{x, ..}` group, and every `super::` chain that climbs to
/// the crate root (counted from the inline module it is written in).
fn references(path: &[String], tokens: &[String]) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    // Inline modules (`mod tests { .. }`) open at these brace depths.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0;
    let mut i = 0;
    while i < tokens.len() {
        let token = tokens[i].as_str();
        match token {
            "{" => {
                depth += 1;
                if i >= 2 && tokens[i - 2] == "mod" {
                    inline.push((tokens[i - 1].clone(), depth));
                }
            }
            "}" => {
                if inline.last().is_some_and(|(_, open)| *open == depth) {
                    inline.pop();
                }
                depth = depth.saturating_sub(1);
            }
            "crate" if tokens.get(i + 1).is_some_and(|t| t == "::") => {
                used.extend(named_after(tokens, i + 2));
            }
            "super" if i == 0 || tokens[i - 1] != "::" => {
                let mut climbs = 0;
                let mut at = i;
                while tokens.get(at).is_some_and(|t| t == "super")
                    && tokens.get(at + 1).is_some_and(|t| t == "::")
                {
                    climbs += 1;
                    at += 2;
                }
                let here = path.len() + inline.len();
                if climbs > 0 && climbs >= here {
                    used.extend(named_after(tokens, at));
                }
                i = at.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    used
}

/// The modules named at `tokens[at]` right after a path's `crate::`: one identifier, or
/// the first identifier of each member of a `{..}` group.
fn named_after(tokens: &[String], at: usize) -> Vec<String> {
    match tokens.get(at).map(String::as_str) {
        Some("{") => {
            let mut names = Vec::new();
            let mut depth = 0;
            let mut item_start = true;
            for token in &tokens[at..] {
                match token.as_str() {
                    "{" => {
                        depth += 1;
                        item_start = depth == 1;
                    }
                    "}" => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    "," => item_start = depth == 1,
                    name if item_start => {
                        names.push(name.to_owned());
                        item_start = false;
                    }
                    _ => {}
                }
            }
            names
        }
        Some(name) => vec![name.to_owned()],
        None => Vec::new(),
    }
}

/// The modules in layers, bottom first: each module sits one above the highest module
/// it uses. `Err` names one cycle per knot of modules that refer to each other.
fn layers(graph: &Graph) -> Result<Vec<Vec<&str>>, Vec<String>> {
    let mut layer_of: BTreeMap<&str, usize> = BTreeMap::new();
    let mut remaining: Vec<&str> = graph.keys().map(String::as_str).collect();
    while !remaining.is_empty() {
        let ready: Vec<&str> = remaining
            .iter()
            .copied()
            .filter(|module| {
                graph[*module]
                    .iter()
                    .all(|used| layer_of.contains_key(used.as_str()))
            })
            .collect();
        if ready.is_empty() {
            return Err(cycles(graph, &remaining));
        }
        for module in &ready {
            let layer = graph[*module]
                .iter()
                .map(|used| layer_of[used.as_str()] + 1)
                .max()
                .unwrap_or(0);
            layer_of.insert(*module, layer);
        }
        remaining.retain(|module| !layer_of.contains_key(module));
    }
    let mut layers: Vec<Vec<&str>> = Vec::new();
    for (module, layer) in layer_of {
        if layers.len() <= layer {
            layers.resize(layer + 1, Vec::new());
        }
        layers[layer].push(module);
    }
    Ok(layers)
}

/// One cycle, as `a -> b -> a`, through each group of `stuck` modules (those left when
/// no more can be layered) that reach each other.
fn cycles(graph: &Graph, stuck: &[&str]) -> Vec<String> {
    let stuck: BTreeSet<&str> = stuck.iter().copied().collect();
    let mut named: BTreeSet<&str> = BTreeSet::new();
    let mut found = Vec::new();
    for start in &stuck {
        if named.contains(start) {
            continue;
        }
        // The shortest way from `start` back to itself, if there is one.
        let mut came_from: BTreeMap<&str, &str> = BTreeMap::new();
        let mut frontier = vec![*start];
        let mut closed = false;
        'search: while !frontier.is_empty() {
            let mut next = Vec::new();
            for module in frontier {
                for used in &graph[module] {
                    let used = used.as_str();
                    if !stuck.contains(used) || came_from.contains_key(used) {
                        continue;
                    }
                    came_from.insert(used, module);
                    if used == *start {
                        closed = true;
                        break 'search;
                    }
                    next.push(used);
                }
            }
            frontier = next;
        }
        if !closed {
            continue;
        }
        let mut cycle = vec![*start];
        let mut at = came_from[start];
        while at != *start {
            cycle.push(at);
            at = came_from[&at];
        }
        cycle.push(*start);
        cycle.reverse();
        named.extend(cycle.iter().copied());
        found.push(cycle.join(" -> "));
    }
    found
}
