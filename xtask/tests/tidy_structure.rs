//! Tidy checks of the code's structure:
//! - no two top-level modules of one crate import each other (a file circle makes both files
//!   harder to read and to move; issue 15 broke `directory`'s `plan` ↔ `rows` and
//!   `store-seaorm`'s `bench` ↔ `lifecycle::bulk`);
//! - one helper makes throwaway PostgreSQL databases (`tenantry_store_seaorm::throwaway`): no
//!   other Rust file says `CREATE DATABASE` or `DROP DATABASE`.
//!
//! An edge `a → b` is a `crate::b…` path (in a `use` or inline) in a file of top-level module
//! `a` of `crates/<crate>/src`, outside comments and outside tests (files named `tests.rs`,
//! files under a `tests` folder, and the trailing `#[cfg(test)] mod …` of a file). `super::`
//! paths (a module and its parent) are not edges. Circles that existed before this check are
//! listed in [`KNOWN_CIRCLES`]; the list only shrinks.

#![allow(clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// `(crate folder, module, module)` circles that predate this check, to be broken later. The
/// test fails when one of them is gone, so the entry is removed with the circle.
const KNOWN_CIRCLES: &[(&str, &str, &str)] = &[("lifecycle", "command", "intake")];

#[test]
fn no_two_modules_of_a_crate_import_each_other() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lies in the workspace root")
        .join("crates");
    let mut found = BTreeSet::new();
    for entry in std::fs::read_dir(&crates).expect("read crates/") {
        let dir = entry.expect("read crates/ entry").path();
        let src = dir.join("src");
        if !src.is_dir() {
            continue;
        }
        let name = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        for (a, b) in circles(&src) {
            found.insert((name.to_owned(), a, b));
        }
    }
    let known: BTreeSet<(String, String, String)> = KNOWN_CIRCLES
        .iter()
        .map(|(c, a, b)| ((*c).to_owned(), (*a).to_owned(), (*b).to_owned()))
        .collect();
    let new: Vec<_> = found.difference(&known).collect();
    assert!(
        new.is_empty(),
        "modules that import each other (crate, module, module): {new:?}. Make the edge one-way: \
         move what both need into a third module, or into the module that is imported"
    );
    let gone: Vec<_> = known.difference(&found).collect();
    assert!(
        gone.is_empty(),
        "these circles no longer exist: remove them from KNOWN_CIRCLES in {}: {gone:?}",
        file!()
    );
}

/// The one file allowed to create and drop databases.
const THROWAWAY_HELPER: &str = "crates/store-seaorm/src/throwaway.rs";

#[test]
fn only_the_throwaway_helper_creates_or_drops_databases() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lies in the workspace root");
    let mut files = Vec::new();
    for dir in ["crates", "xtask", "examples", "fixtures", "migrations"] {
        if root.join(dir).is_dir() {
            collect(&root.join(dir), &mut files);
        }
    }
    let this = Path::new(file!()).file_name().expect("this file's name");
    let mut offenders = Vec::new();
    for file in files {
        let rel = file.strip_prefix(root).expect("file under the root");
        if rel == Path::new(THROWAWAY_HELPER) || rel.file_name() == Some(this) {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source file");
        if text.contains("CREATE DATABASE") || text.contains("DROP DATABASE") {
            offenders.push(rel.display().to_string());
        }
    }
    assert!(
        root.join(THROWAWAY_HELPER).is_file(),
        "{THROWAWAY_HELPER} is missing"
    );
    assert!(
        offenders.is_empty(),
        "these files create or drop databases themselves: {offenders:?}. Use \
         tenantry_store_seaorm::throwaway (create_postgres_database, drop_postgres_database, \
         database_url), or from outside Rust `tenantry-bench scratch-database create|drop NAME`"
    );
}

#[test]
fn edges_are_read_from_use_groups_and_inline_paths() {
    let text = "use crate::{a::{X, Y}, b};\n// use crate::c;\nfn f() -> crate::d::Z { todo!() }\n\
                #[cfg(test)]\nmod tests {\n    use crate::e;\n}\n";
    let edges: Vec<String> = crate_paths(text).into_iter().collect();
    assert_eq!(edges, ["a", "b", "d"]);
}

/// The circles among the top-level modules under `src`, each as `(smaller, larger)`.
fn circles(src: &Path) -> Vec<(String, String)> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    collect(src, &mut files);
    for file in files {
        let rel = file.strip_prefix(src).expect("file under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or_default()
            .trim_end_matches(".rs")
            .to_owned();
        let is_test = rel.file_name().is_some_and(|n| n == "tests.rs")
            || rel.components().any(|c| c.as_os_str() == "tests");
        if is_test || top == "lib" || top == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&file).expect("read source file");
        for target in crate_paths(&text) {
            if target != top {
                edges.entry(top.clone()).or_default().insert(target);
            }
        }
    }
    let mut out = Vec::new();
    for (a, targets) in &edges {
        for b in targets {
            if a < b && edges.get(b).is_some_and(|back| back.contains(a)) {
                out.push((a.clone(), b.clone()));
            }
        }
    }
    out
}

/// The first segment of every `crate::` path in `text` (comments and the trailing test module
/// left out), including each item of a `crate::{…}` group.
fn crate_paths(text: &str) -> BTreeSet<String> {
    let mut code = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line == "#[cfg(test)]" && lines.peek().is_some_and(|next| next.starts_with("mod ")) {
            break;
        }
        let line = line.split("//").next().unwrap_or_default();
        code.push_str(line);
        code.push('\n');
    }
    let mut out = BTreeSet::new();
    let mut rest = code.as_str();
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        rest = &rest[at + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // `$crate::`, `tenantry_crate::`, …
        }
        if let Some(group) = rest.strip_prefix('{') {
            for item in top_level_items(group) {
                out.insert(ident(item.trim_start()));
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out.retain(|name| !name.is_empty());
    out
}

/// The comma-separated items of a brace group whose opening brace was just consumed.
fn top_level_items(group: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in group.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => {
                items.push(&group[start..i]);
                break;
            }
            '}' => depth -= 1,
            ',' if depth == 0 => {
                items.push(&group[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items
}

fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source folder") {
        let path = entry.expect("read source entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "target") {
                collect(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
