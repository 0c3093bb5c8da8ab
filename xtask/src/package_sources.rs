//! Stale extracted sources of our own crates in Cargo's home, cleared before `cargo package`.
//!
//! `cargo package --workspace` verifies each `.crate` against the others through a temporary
//! local registry in `target/package/tmp-registry`. Cargo extracts that registry's crates into
//! `$CARGO_HOME/registry/src/-<hash>/<name>-<version>`, where the hash comes from the registry's
//! path, and it never extracts a crate again while that folder exists. A clone at a path used
//! before (a CI clone folder, say) therefore verifies against the sources of the *earlier* run
//! when the version number has not changed: a crate that uses a module added since fails with
//! "could not find `outcome` in `tenantry_kernel`" although the work tree is fine.
//!
//! Before the package step the gate removes every extracted `tenantry-*` folder under a source
//! folder that is not a named registry (local registries have an empty name, so their folder
//! starts with `-`). Cargo extracts them again from the fresh `.crate` files.

use std::io;
use std::path::{Path, PathBuf};

/// Prefix of every crate this workspace publishes.
const OUR_PREFIX: &str = "tenantry-";

/// `$CARGO_HOME`, or `$HOME/.cargo` when unset (Cargo's own default); `None` without either.
pub fn cargo_home() -> Option<PathBuf> {
    if let Some(home) = std::env::var_os("CARGO_HOME") {
        return Some(PathBuf::from(home));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cargo"))
}

/// Removes the extracted `tenantry-*` sources of local registries under `cargo_home`; returns
/// how many folders it removed. A missing `registry/src` is not an error (nothing was
/// extracted yet). Sources of named registries (crates.io's `index.crates.io-…`) are left alone.
///
/// # Errors
/// The first I/O error while listing or removing, with the path it concerns.
pub fn clear_stale_extracted_sources(cargo_home: &Path) -> io::Result<usize> {
    let src = cargo_home.join("registry").join("src");
    let registries = match std::fs::read_dir(&src) {
        Ok(entries) => entries,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(error) => return Err(with_path(error, &src)),
    };
    let mut removed = 0;
    for registry in registries {
        let registry = registry.map_err(|e| with_path(e, &src))?;
        if !registry.file_name().to_string_lossy().starts_with('-') {
            continue;
        }
        let folder = registry.path();
        if !folder.is_dir() {
            continue;
        }
        for extracted in std::fs::read_dir(&folder).map_err(|e| with_path(e, &folder))? {
            let extracted = extracted.map_err(|e| with_path(e, &folder))?;
            if extracted
                .file_name()
                .to_string_lossy()
                .starts_with(OUR_PREFIX)
            {
                let path = extracted.path();
                std::fs::remove_dir_all(&path).map_err(|e| with_path(e, &path))?;
                removed += 1;
            }
        }
    }
    Ok(removed)
}

fn with_path(error: io::Error, path: &Path) -> io::Error {
    io::Error::new(error.kind(), format!("{}: {error}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A scratch folder under the target directory, removed on drop.
    struct Scratch(PathBuf);

    impl Scratch {
        fn new(name: &str) -> Self {
            let path = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("..")
                .join("target")
                .join("xtask-scratch")
                .join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).expect("scratch folder");
            Self(path)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn touch(path: &Path) {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, "x").expect("write");
    }

    #[test]
    fn removes_our_crates_from_local_registries_only() {
        let home = Scratch::new("cargo-home");
        let src = home.0.join("registry").join("src");
        let stale = src.join("-14cd1cce6819ff87").join("tenantry-kernel-0.1.0");
        let stale_other = src.join("-22c3805da5a543b4").join("tenantry-fence-0.1.0");
        let foreign_local = src.join("-14cd1cce6819ff87").join("serde-1.0.0");
        let crates_io = src
            .join("index.crates.io-1949cf8c6b5b557f")
            .join("tenantry-kernel-0.1.0");
        for dir in [&stale, &stale_other, &foreign_local, &crates_io] {
            touch(&dir.join("src").join("lib.rs"));
        }

        let removed = clear_stale_extracted_sources(&home.0).expect("clear");

        assert_eq!(removed, 2);
        assert!(!stale.exists());
        assert!(!stale_other.exists());
        assert!(foreign_local.exists(), "only our crates are removed");
        assert!(crates_io.exists(), "named registries are left alone");
    }

    #[test]
    fn a_home_without_extracted_sources_is_not_an_error() {
        let home = Scratch::new("empty-home");
        assert_eq!(clear_stale_extracted_sources(&home.0).expect("clear"), 0);
    }
}
