//! Tidy check of file length: no Rust file under `crates/` or `xtask/` is longer than
//! [`MAX_LINES`] lines, except the files of [`LONG_FILES`] (empty since issue 28 split the last
//! files that predated the check).
//!
//! A long file mixes concerns and is hard to read as a newcomer: split it by concern into a
//! folder of modules (`name/{mod.rs, …}`, each opening with a `//!` comment). The allow-list only
//! shrinks: the check fails when a listed file is gone or is no longer over the limit, so an
//! entry would leave the list with the split that shortened it.

#![allow(clippy::expect_used)]

use std::path::{Path, PathBuf};

/// The most lines a Rust file may have.
const MAX_LINES: usize = 850;

/// Files allowed over [`MAX_LINES`] (paths from the workspace root, `/`-separated): none. The
/// files that predated the check were split by concern (issue 28); the list only shrinks, so no
/// file is added here: split it instead.
const LONG_FILES: &[&str] = &[];

#[test]
fn no_rust_file_is_longer_than_the_limit_unless_listed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask lies in the workspace root");
    let mut files = Vec::new();
    for dir in ["crates", "xtask"] {
        collect(&root.join(dir), &mut files);
    }
    assert!(!files.is_empty(), "no Rust files under {}", root.display());
    let lengths: Vec<(String, usize)> = files
        .iter()
        .map(|file| {
            let rel = file.strip_prefix(root).expect("file under the root");
            let rel = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            let text = std::fs::read_to_string(file).expect("read source file");
            (rel, text.lines().count())
        })
        .collect();
    let (too_long, stale) = findings(&lengths, LONG_FILES);
    let mut problems = Vec::new();
    if !too_long.is_empty() {
        problems.push(format!(
            "these Rust files are longer than {MAX_LINES} lines: {too_long:?}. Split each by \
             concern into a folder of modules (each opening with a `//!` comment) of at most \
             {MAX_LINES} lines; do not add it to LONG_FILES in {}",
            file!()
        ));
    }
    if !stale.is_empty() {
        problems.push(format!(
            "these files of LONG_FILES in {} are gone or now at most {MAX_LINES} lines: \
             {stale:?}. Remove them from the list (it only shrinks)",
            file!()
        ));
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_length_check_finds_long_unlisted_files_and_stale_entries() {
    let lengths = [
        ("crates/a/src/long.rs".to_owned(), MAX_LINES + 1),
        ("crates/a/src/listed.rs".to_owned(), MAX_LINES + 1),
        ("crates/a/src/split.rs".to_owned(), MAX_LINES),
        ("crates/a/src/short.rs".to_owned(), 10),
    ];
    let allowed = [
        "crates/a/src/listed.rs",
        "crates/a/src/split.rs",
        "crates/a/src/gone.rs",
    ];
    let (too_long, stale) = findings(&lengths, &allowed);
    assert_eq!(
        too_long,
        [format!("crates/a/src/long.rs ({} lines)", MAX_LINES + 1)]
    );
    assert_eq!(stale, ["crates/a/src/gone.rs", "crates/a/src/split.rs"]);
}

/// The files over [`MAX_LINES`] not in `allowed` (each with its line count), and the entries of
/// `allowed` that are no file of `lengths` or one of at most [`MAX_LINES`] lines; both sorted.
fn findings(lengths: &[(String, usize)], allowed: &[&str]) -> (Vec<String>, Vec<String>) {
    let mut too_long: Vec<String> = lengths
        .iter()
        .filter(|(path, lines)| *lines > MAX_LINES && !allowed.contains(&path.as_str()))
        .map(|(path, lines)| format!("{path} ({lines} lines)"))
        .collect();
    let mut stale: Vec<String> = allowed
        .iter()
        .filter(|entry| {
            !lengths
                .iter()
                .any(|(path, lines)| path == *entry && *lines > MAX_LINES)
        })
        .map(|entry| (*entry).to_owned())
        .collect();
    too_long.sort();
    stale.sort();
    (too_long, stale)
}

/// Every `.rs` file under `dir`, leaving out `target` and hidden folders.
fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read source folder") {
        let path = entry.expect("read source entry").path();
        let name = path.file_name().map(|n| n.to_string_lossy().into_owned());
        if path.is_dir() {
            if name.is_some_and(|n| n != "target" && !n.starts_with('.')) {
                collect(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
