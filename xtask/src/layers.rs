//! `cargo xtask layers`: `fluxio-core`'s modules import only downwards.
//!
//! ARCHITECTURE.md ("Layers") lists the layers of `fluxio-core` from the
//! bottom up; [`LAYERS`] is the same list, which this check holds the code to.
//! A module may name (`crate::module` in code, outside comments and test
//! modules) a module of its own layer or of one below, never one above, and
//! no two modules may import each other around a circle.
//!
//! The check reads the source as text, so it is deliberately simple: a
//! reference is `crate::` (or `super::`, read from the crate root) followed by a module name (or a `{...}` group of
//! them) in code, a module is a file or a folder of `src/` (`store/lease` is
//! its own module, `store` is `store/mod.rs`), and an item reached through a
//! re-export (`crate::store::Lease`) counts as the module it is named
//! through. `#[cfg(test)] mod tests` at the end of a file is not read: a test
//! may use anything.
//!
//! [`KNOWN`] lists the imports that break the order today, each with what
//! is to move. They are to be removed, not added to: the check fails on
//! an import against the order that is not listed, and on a listed one that
//! the code no longer has, so the list only ever shrinks.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;

use crate::Result;

/// The layers of `fluxio-core`, bottom first: each a name and its modules.
pub(crate) const LAYERS: &[(&str, &[&str])] = &[
    ("values", &["value"]),
    (
        "errors",
        &[
            "error",
            "store/status",
            "store/error_kind",
            "structure/changes",
        ],
    ),
    ("context", &["context"]),
    (
        "store types",
        &[
            "structure",
            "store",
            "store/branch",
            "store/checkpoint",
            "store/journal",
            "store/lease",
            "store/list",
            "store/memory",
            "store/redact",
            "store/retry",
            "store/waits",
            "history",
            "clock",
            "outcome",
        ],
    ),
    (
        "stages",
        &["stage", "middleware", "callback", "stream", "metrics"],
    ),
    ("program", &["compile", "version", "waiting", "child"]),
    (
        "run",
        &[
            "interpret",
            "interpret/ownership",
            "interpret/renew",
            "interpret/tail",
            "durability",
            "stage/bodies",
        ],
    ),
    ("pipeline", &["pipeline", "queue", "shape"]),
    ("workers", &["recovery", "schedule"]),
    ("tools", &["testing", "store/conformance", "lib"]),
];

/// Imports that break the order today (from, to): upward, or closing a
/// circle inside a layer.
/// Remove an entry with the import; never add one.
pub(crate) const KNOWN: &[(&str, &str)] = &[
    // `EncodedValue` turns value errors into `Error`: the conversion moves up
    ("value", "error"),
];

/// The layer index of a module: its own entry, or its parent folder's.
fn layer_of(module: &str) -> Option<usize> {
    let find = |name: &str| {
        LAYERS
            .iter()
            .position(|(_, modules)| modules.contains(&name))
    };
    find(module).or_else(|| module.split('/').next().and_then(find))
}

/// The module a file of `src/` is: `store/lease.rs` is `store/lease`,
/// `store/mod.rs` is `store`, `value/ser.rs` is `value` (a folder is one
/// module unless [`LAYERS`] names its files).
fn module_of(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if let Some(last) = parts.last_mut() {
        if let Some(stem) = last.strip_suffix(".rs") {
            *last = stem.to_owned();
        }
    }
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    let full = parts.join("/");
    let mut name = full.as_str();
    loop {
        if LAYERS.iter().any(|(_, modules)| modules.contains(&name)) {
            return name.to_owned();
        }
        match name.rsplit_once('/') {
            Some((parent, _)) => name = parent,
            None => return parts.first().cloned().unwrap_or_default(),
        }
    }
}

/// What `super::` names in the file at `relative`, spelled from the crate
/// root (`crate::store::` in `store/checkpoint.rs`, `crate::` in
/// `store/mod.rs`), so that `super::branch` counts as `crate::store::branch`.
fn super_path(relative: &Path) -> String {
    let mut parts: Vec<String> = relative
        .iter()
        .map(|part| part.to_string_lossy().trim_end_matches(".rs").to_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts.pop(); // the module itself
    let mut path = String::from("crate::");
    for part in parts {
        path.push_str(&part);
        path.push_str("::");
    }
    path
}

/// The source of a file without comments, string contents and the test
/// module at its end.
fn code_of(source: &str) -> String {
    let mut code = String::with_capacity(source.len());
    let mut lines = source.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        let mut in_string = false;
        let mut previous = ' ';
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            if !in_string && c == '/' && chars.peek() == Some(&'/') {
                break;
            }
            if c == '"' && previous != '\\' {
                in_string = !in_string;
            } else if !in_string {
                code.push(c);
            }
            previous = c;
        }
        code.push('\n');
    }
    code
}

/// The modules a piece of code names through `crate::`.
fn references(code: &str, submodules: &BTreeSet<String>) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut add = |path: &str| {
        let first = ident(path);
        if first.is_empty() || first.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
            return;
        }
        let rest = &path[first.len()..];
        let module = match rest.strip_prefix("::") {
            Some(after) if submodules.contains(&format!("{first}/{}", ident(after))) => {
                format!("{first}/{}", ident(after))
            }
            _ => first,
        };
        found.insert(module);
    };
    for (at, _) in code.match_indices("crate::") {
        let path = code[at + "crate::".len()..].trim_start();
        if let Some(group) = path.strip_prefix('{') {
            let mut depth = 0usize;
            let mut start = 0usize;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => {
                        add(group[start..i].trim());
                        break;
                    }
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        add(group[start..i].trim());
                        start = i + 1;
                    }
                    _ => {}
                }
            }
        } else {
            add(path);
        }
    }
    found
}

/// Every module's references to other modules of `fluxio-core`.
pub(crate) fn imports(src: &Path) -> Result<BTreeMap<String, BTreeSet<String>>> {
    let mut files = Vec::new();
    let mut folders = vec![src.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let entries =
            fs::read_dir(&folder).map_err(|e| format!("cannot read {}: {e}", folder.display()))?;
        for entry in entries {
            let path = entry
                .map_err(|e| format!("cannot read {}: {e}", folder.display()))?
                .path();
            if path.is_dir() {
                folders.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                files.push(path);
            }
        }
    }
    let relative = |path: &Path| path.strip_prefix(src).map(Path::to_path_buf);
    let submodules: BTreeSet<String> = files
        .iter()
        .filter_map(|path| relative(path).ok())
        .map(|path| module_of(&path))
        .collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in &files {
        let rel = relative(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let module = module_of(&rel);
        let source =
            fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let code = code_of(&source).replace("super::", &super_path(&rel));
        let named = references(&code, &submodules);
        let entry = graph.entry(module.clone()).or_default();
        entry.extend(
            named
                .into_iter()
                .filter(|to| *to != module && submodules.contains(to)),
        );
    }
    Ok(graph)
}

/// The imports against the order: (from, to) where `to` is in a higher layer
/// than `from`, or in a module not in [`LAYERS`].
pub(crate) fn upward(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<(String, String)> {
    let mut found = Vec::new();
    for (from, tos) in graph {
        for to in tos {
            match (layer_of(from), layer_of(to)) {
                (Some(a), Some(b)) if b <= a => {}
                _ => found.push((from.clone(), to.clone())),
            }
        }
    }
    found
}

/// The groups of modules that import each other around a circle, once the
/// [`KNOWN`] imports are set aside: every module of a group reaches every
/// other one. A graph of a few dozen modules needs nothing cleverer.
pub(crate) fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let known: BTreeSet<(&str, &str)> = KNOWN.iter().copied().collect();
    let reach = |start: &str| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut todo = vec![start.to_owned()];
        while let Some(module) = todo.pop() {
            for to in graph.get(&module).into_iter().flatten() {
                if !known.contains(&(module.as_str(), to.as_str())) && seen.insert(to.clone()) {
                    todo.push(to.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|module| (module, reach(module))).collect();
    let mut grouped = BTreeSet::new();
    let mut groups = Vec::new();
    for (module, from_it) in &reached {
        if grouped.contains(*module) || !from_it.contains(*module) {
            continue;
        }
        let group: Vec<String> = from_it
            .iter()
            .filter(|other| reached.get(other).is_some_and(|r| r.contains(*module)))
            .cloned()
            .collect();
        grouped.extend(group.iter().cloned());
        groups.push(group);
    }
    groups
}

/// `cargo xtask layers`: fails on an import against the order that is not in
/// [`KNOWN`], on an entry of [`KNOWN`] the code no longer has, and on a circle.
pub(crate) fn check(core_src: &Path) -> Result<()> {
    let graph = imports(core_src)?;
    let found = upward(&graph);
    let known: BTreeSet<(String, String)> = KNOWN
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    let mut problems = Vec::new();
    for (from, to) in &found {
        if !known.contains(&(from.clone(), to.clone())) {
            let (a, b) = (layer_of(from), layer_of(to));
            problems.push(match (a, b) {
                (Some(a), Some(b)) => format!(
                    "`{from}` ({}) imports `{to}` ({}), a layer above it",
                    LAYERS[a].0, LAYERS[b].0
                ),
                _ => format!("`{from}` imports `{to}`, and one of them is in no layer of LAYERS"),
            });
        }
    }
    for (from, to) in &known {
        if !graph.get(from).is_some_and(|tos| tos.contains(to)) {
            problems.push(format!(
                "`{from}` no longer imports `{to}`: remove it from KNOWN"
            ));
        }
    }
    for group in circles(&graph) {
        problems.push(format!(
            "modules that import each other around a circle: {}",
            group.join(", ")
        ));
    }
    if problems.is_empty() {
        println!(
            "layers: {} modules, imports in layer order ({} known exceptions left)",
            graph.len(),
            KNOWN.len()
        );
        Ok(())
    } else {
        Err(format!(
            "fluxio-core's imports break the layer order (xtask/src/layers.rs, ARCHITECTURE.md):\n  {}",
            problems.join("\n  ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subs(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn references_read_paths_groups_and_submodules() {
        let code = "use crate::store::{Checkpoint, lease::X};\nuse crate::{error::Error, value};\nlet x = crate::store::lease::KeepLease::new();\n";
        let found = references(code, &subs(&["store", "store/lease", "error", "value"]));
        assert_eq!(found, subs(&["store", "error", "value", "store/lease"]));
    }

    #[test]
    fn comments_strings_and_test_modules_are_not_imports() {
        let source = "/// see [`crate::stage`]\nlet s = \"crate::pipeline\"; // crate::compile\nuse crate::value;\n#[cfg(test)]\nmod tests {\n use crate::store;\n}\n";
        let found = references(
            &code_of(source),
            &subs(&["stage", "pipeline", "compile", "value", "store"]),
        );
        assert_eq!(found, subs(&["value"]));
    }

    #[test]
    fn super_is_read_from_the_crate_root() {
        assert_eq!(
            super_path(Path::new("store/checkpoint.rs")),
            "crate::store::"
        );
        assert_eq!(super_path(Path::new("store/mod.rs")), "crate::");
        assert_eq!(
            super_path(Path::new("store/checkpoint/codec.rs")),
            "crate::store::checkpoint::"
        );
    }

    #[test]
    fn an_upward_import_is_found() {
        let mut graph = BTreeMap::new();
        graph.insert("value".to_owned(), subs(&["pipeline"]));
        graph.insert("pipeline".to_owned(), subs(&["value"]));
        assert_eq!(
            upward(&graph),
            vec![("value".to_owned(), "pipeline".to_owned())]
        );
        assert_eq!(
            circles(&graph),
            vec![vec!["pipeline".to_owned(), "value".to_owned()]]
        );
    }

    #[test]
    fn every_module_of_core_is_in_a_layer() -> Result<()> {
        let src = crate::workspace_root()?.join("crates/fluxio-core/src");
        let graph = imports(&src)?;
        let missing: Vec<&String> = graph.keys().filter(|m| layer_of(m).is_none()).collect();
        assert!(missing.is_empty(), "modules in no layer: {missing:?}");
        Ok(())
    }

    /// The check `cargo xtask ci` runs, so plain `cargo test` catches a new
    /// upward import too.
    #[test]
    fn core_imports_follow_the_layers() -> Result<()> {
        check(&crate::workspace_root()?.join("crates/fluxio-core/src"))
    }
}
