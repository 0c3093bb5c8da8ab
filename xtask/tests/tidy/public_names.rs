//! Tidy check that no two crates define a public type of the same name, with the scanner of
//! public type names it reads the sources with.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use super::*;

/// Public type names two crates may both define for now.
const SHARED_TYPE_NAMES: &[&str] = &[];

#[test]
fn no_two_crates_define_a_public_type_of_the_same_name() {
    let root = workspace_root();
    let mut definitions = Vec::new();
    for dir in fs::read_dir(root.join("crates"))
        .expect("crates/ exists")
        .flatten()
    {
        let src = dir.path().join("src");
        if !src.is_dir() {
            continue;
        }
        let krate = relative(&root, &dir.path());
        let mut files = Vec::new();
        collect_rust_files(&src, &mut files);
        let skipped = test_module_paths(&files);
        for file in files
            .iter()
            .filter(|f| !skipped.iter().any(|s| f.starts_with(s)))
        {
            let text = fs::read_to_string(file).unwrap_or_default();
            for (name, line) in public_type_names(&text) {
                definitions.push(Definition {
                    name,
                    krate: krate.clone(),
                    at: format!("{}:{line}", relative(&root, file)),
                });
            }
        }
    }
    definitions.sort_by(|a, b| a.at.cmp(&b.at));
    assert!(
        definitions.iter().any(|d| d.name == "DispatchOutcome"),
        "the scan found no public type: is it reading crates/*/src?"
    );
    let clashes = shared_names(&definitions, SHARED_TYPE_NAMES);
    assert!(
        clashes.is_empty(),
        "each public type name belongs to one crate; rename one of each pair to what it is (a \
         re-export with `pub use` is fine):\n  {}",
        clashes.join("\n  ")
    );
}

#[test]
fn the_public_type_scan_reads_items_and_skips_test_code() {
    let text = "\
//! doc
/// pub struct InDocComment;
pub struct Plain;
pub(crate) struct CrateOnly;
    pub enum Nested<T> {
pub trait Port: Send {}
pub type Alias = u8;
#[cfg(feature = \"testing\")]
pub struct Fake;
#[cfg(test)]
pub struct TestOnly;
#[cfg(test)]
mod tests {
    pub struct InTests;
}
pub struct After;
";
    let names: Vec<String> = public_type_names(text)
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        ["Plain", "Nested", "Port", "Alias", "Fake", "After"],
        "{text}"
    );
    let defs = [
        ("Same", "crates/a"),
        ("Same", "crates/b"),
        ("Own", "crates/a"),
        ("Own", "crates/a"),
    ]
    .map(|(name, krate)| Definition {
        name: name.to_owned(),
        krate: krate.to_owned(),
        at: format!("{krate}/src/lib.rs:1"),
    });
    assert_eq!(
        shared_names(&defs, &[]),
        ["Same: crates/a/src/lib.rs:1, crates/b/src/lib.rs:1"]
    );
    assert!(shared_names(&defs, &["Same"]).is_empty());
}

/// One `pub struct | enum | trait | type` item.
#[derive(Debug)]
struct Definition {
    name: String,
    /// The crate's folder, e.g. `crates/kernel`.
    krate: String,
    /// `file:line`.
    at: String,
}

/// `NAME: where, where` for every name defined in more than one crate, except `allowed`.
fn shared_names(definitions: &[Definition], allowed: &[&str]) -> Vec<String> {
    let mut by_name: BTreeMap<&str, Vec<&Definition>> = BTreeMap::new();
    for d in definitions {
        by_name.entry(d.name.as_str()).or_default().push(d);
    }
    by_name
        .into_iter()
        .filter(|(name, defs)| {
            !allowed.contains(name)
                && defs
                    .iter()
                    .map(|d| d.krate.as_str())
                    .collect::<BTreeSet<_>>()
                    .len()
                    > 1
        })
        .map(|(name, defs)| {
            let places: Vec<&str> = defs.iter().map(|d| d.at.as_str()).collect();
            format!("{name}: {}", places.join(", "))
        })
        .collect()
}

/// The names (and 1-based lines) of the `pub struct | enum | trait | type` items of one file,
/// leaving out items marked `#[cfg(test)]` and the bodies of inline `#[cfg(test)]` modules.
fn public_type_names(text: &str) -> Vec<(String, usize)> {
    let mut names = Vec::new();
    let mut cfg_test = false;
    // The indentation of the `mod` line of the inline test module being skipped.
    let mut skipping: Option<usize> = None;
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        if let Some(depth) = skipping {
            if indent == depth && trimmed.starts_with('}') {
                skipping = None;
            }
            continue;
        }
        if trimmed == "#[cfg(test)]" {
            cfg_test = true;
            continue;
        }
        if trimmed.starts_with("#[") || trimmed.is_empty() || trimmed.starts_with("//") {
            continue;
        }
        if std::mem::take(&mut cfg_test) {
            if item_name(trimmed, "mod").is_some() && trimmed.ends_with('{') {
                skipping = Some(indent);
            }
            continue;
        }
        if let Some(name) = ["struct", "enum", "trait", "type"]
            .iter()
            .find_map(|kind| item_name(trimmed.strip_prefix("pub ")?, kind))
        {
            names.push((name, index + 1));
        }
    }
    names
}

/// The identifier after `kind ` (`struct`, `mod`, ...) at the start of `item`, after an
/// optional visibility.
fn item_name(item: &str, kind: &str) -> Option<String> {
    let item = item
        .strip_prefix("pub ")
        .or_else(|| item.strip_prefix("pub(crate) "))
        .unwrap_or(item);
    let rest = item.strip_prefix(kind)?.strip_prefix(' ')?;
    let name: String = rest
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// The files and folders of modules declared as `#[cfg(test)] mod name;` by one of `files`:
/// `name.rs` and `name/` beside a `lib.rs`, `main.rs` or `mod.rs`, under `stem/` otherwise.
fn test_module_paths(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut paths = Vec::new();
    for file in files {
        let text = fs::read_to_string(file).unwrap_or_default();
        let Some(parent) = file.parent() else {
            continue;
        };
        let stem = file.file_stem().and_then(|s| s.to_str()).unwrap_or("");
        let base = if matches!(stem, "lib" | "main" | "mod") {
            parent.to_path_buf()
        } else {
            parent.join(stem)
        };
        let mut cfg_test = false;
        for line in text.lines().map(str::trim) {
            if line == "#[cfg(test)]" {
                cfg_test = true;
            } else if !line.starts_with("#[")
                && !line.is_empty()
                && std::mem::take(&mut cfg_test)
                && let Some(name) = line.strip_suffix(';').and_then(|l| item_name(l, "mod"))
            {
                paths.push(base.join(format!("{name}.rs")));
                paths.push(base.join(name));
            }
        }
    }
    paths
}
