//! Reads a crate's sources to find which of its modules refer to which (shared by the
//! module-layers tests of the proxy and the control plane).
//!
//! The scan reads the source, not the compiler's view: comments and string literals are
//! blanked first, and `use` groups (`crate::{a, b::c}`) count each path they name.

#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Modules and the sibling modules each one refers to.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// Every `.rs` file under `src`, with its path relative to `src`.
pub fn read_sources(src: &Path) -> io::Result<Vec<(PathBuf, String)>> {
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
pub fn module_path(file: &Path) -> Vec<String> {
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

/// The module paths the code of the file defining module `path` refers to, each as far
/// as it is written: every `crate::a::b` (and each member of a `crate::{..}` group), and
/// every `super::` chain (counted from the inline module it is written in, so a test
/// module's `super::` is its file's module).
pub fn references(path: &[String], tokens: &[String]) -> BTreeSet<Vec<String>> {
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
                used.extend(paths_after(tokens, i + 2, &[]));
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
                let here: Vec<String> = path
                    .iter()
                    .cloned()
                    .chain(inline.iter().map(|(name, _)| name.clone()))
                    .collect();
                if climbs > 0 && climbs <= here.len() {
                    let base = &here[..here.len() - climbs];
                    used.extend(paths_after(tokens, at, base));
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

/// The paths written at `tokens[at]` (right after `crate::` or a `super::` chain), each
/// prefixed with `base`: `a::b::Thing`, or every member of a `{..}` group, groups nested.
fn paths_after(tokens: &[String], at: usize, base: &[String]) -> Vec<Vec<String>> {
    let mut path = base.to_vec();
    let mut i = at;
    loop {
        match tokens.get(i).map(String::as_str) {
            Some("{") => return group_after(tokens, i, &path),
            Some(name) if name.chars().all(|c| c.is_alphanumeric() || c == '_') => {
                path.push(name.to_owned());
                if tokens.get(i + 1).is_some_and(|t| t == "::") {
                    i += 2;
                    continue;
                }
                return vec![path];
            }
            _ => return vec![path],
        }
    }
}

/// Each member's path of the `{..}` group opening at `tokens[open]`.
fn group_after(tokens: &[String], open: usize, base: &[String]) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut depth = 0;
    let mut item_start = true;
    for (offset, token) in tokens[open..].iter().enumerate() {
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
            _ if item_start => {
                paths.extend(paths_after(tokens, open + offset, base));
                item_start = false;
            }
            _ => {}
        }
    }
    paths
}

/// For each module with submodules (the crate root is `[]`), the graph of its child
/// modules: which of its children refer to which other. A reference from anywhere
/// inside child `a` to anywhere inside its sibling `b` is an edge `a -> b`; references to
/// a module's own parts or to its ancestors are not edges.
pub fn sibling_graphs(files: &[(PathBuf, String)]) -> BTreeMap<Vec<String>, Graph> {
    let mut known: BTreeSet<Vec<String>> = BTreeSet::new();
    for (file, _) in files {
        let path = module_path(file);
        for end in 0..=path.len() {
            known.insert(path[..end].to_vec());
        }
    }
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for module in known.iter().filter(|m| !m.is_empty()) {
        let parent = module[..module.len() - 1].to_vec();
        let name = module[module.len() - 1].clone();
        graphs.entry(parent).or_default().entry(name).or_default();
    }
    for (file, text) in files {
        let from = module_path(file);
        for written in references(&from, &tokens(&code_only(text))) {
            // As far as the path names modules; the rest is an item.
            let mut to = Vec::new();
            for segment in written {
                to.push(segment);
                if !known.contains(&to) {
                    to.pop();
                    break;
                }
            }
            let shared = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if shared < from.len() && shared < to.len() {
                let graph = graphs.entry(from[..shared].to_vec()).or_default();
                graph
                    .entry(from[shared].clone())
                    .or_default()
                    .insert(to[shared].clone());
            }
        }
    }
    graphs
}

/// `text` with comments removed and string and character literals emptied, so that
/// only code is searched for paths. Lifetimes (`'a`) stay as they are.
pub fn code_only(text: &str) -> String {
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
pub fn raw_string_end(chars: &[char], start: usize) -> Option<usize> {
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
pub fn tokens(code: &str) -> Vec<String> {
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

/// The modules in layers, bottom first: each module sits one above the highest module
/// it uses. `Err` names one cycle per knot of modules that refer to each other.
pub fn layers(graph: &Graph) -> Result<Vec<Vec<&str>>, Vec<String>> {
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
pub fn cycles(graph: &Graph, stuck: &[&str]) -> Vec<String> {
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
