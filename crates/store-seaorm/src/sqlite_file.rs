//! The file behind a SQLite database URL: its folder, checked before a database is created in
//! it ([`check_folder`]), and the lock that keeps a second serving process off a database one
//! already uses ([`lock`]).
//!
//! SQLite serves one process (docs/operations.md, "One process per SQLite database"):
//! `tenantry serve` and `tenantry migrate` take an exclusive lock on `<database file>-tenantry.lock`
//! for as long as they run. The lock is the operating system's (`flock` on Unix, `LockFileEx`
//! on Windows, through [`std::fs::File::try_lock`]), so it goes with the process however the
//! process ends (SIGKILL included): a lock file left on disk holds nothing. Operator commands
//! (`commands`, `fences`, `prune`) do not take it and keep working beside a running service.

use std::fs::{File, OpenOptions, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

/// Suffix of the lock file, appended to the database file's name.
pub const LOCK_SUFFIX: &str = "-tenantry.lock";

/// Why a SQLite database file cannot be used (its folder, or another process holding it).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteFileError {
    /// The folder the database file is in does not exist (SQLite would only say "unable to
    /// open database file").
    #[error(
        "the folder {} of the SQLite database {} does not exist: create it (and make it writable for this user) or fix the path in database_url",
        folder.display(),
        database.display()
    )]
    FolderMissing {
        /// The missing folder.
        folder: PathBuf,
        /// The database file the URL names.
        database: PathBuf,
    },
    /// A file cannot be created in the database's folder: SQLite creates the database there
    /// and its `-wal` and `-shm` files next to it.
    #[error(
        "cannot create files in the folder {} of the SQLite database {} ({source}): SQLite keeps the database and its -wal and -shm files there; make the folder writable for this user or choose another path in database_url",
        folder.display(),
        database.display()
    )]
    FolderNotWritable {
        /// The folder.
        folder: PathBuf,
        /// The database file the URL names.
        database: PathBuf,
        /// What creating a file there answered.
        #[source]
        source: io::Error,
    },
    /// Another process (a `tenantry serve` or `tenantry migrate`) holds the database's lock.
    #[error(
        "the SQLite database {} is in use by another `tenantry serve` or `tenantry migrate` (it holds the lock {}): a SQLite database serves one process; stop the other one first, or use PostgreSQL for several replicas (operator commands such as `tenantry commands list` work beside a running service)",
        database.display(),
        lock.display()
    )]
    InUse {
        /// The database file.
        database: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// Opening or locking the lock file failed otherwise.
    #[error("cannot lock the SQLite database {} through {}: {source}", database.display(), lock.display())]
    Lock {
        /// The database file.
        database: PathBuf,
        /// The lock file.
        lock: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
}

/// An exclusive hold on a SQLite database file for this process, released when dropped (or when
/// the process ends, however it ends).
#[derive(Debug)]
pub struct SqliteLock {
    _file: File,
    path: PathBuf,
}

impl SqliteLock {
    /// The lock file (`<database file>-tenantry.lock`).
    pub fn path(&self) -> &Path {
        &self.path
    }
}

/// The file a SQLite URL names (`sqlite://PATH?..`, `sqlite:PATH`), or `None` for an in-memory
/// database or another scheme.
pub(crate) fn sqlite_file(url: &str) -> Option<&str> {
    let rest = url.strip_prefix("sqlite:")?;
    let rest = rest.strip_prefix("//").unwrap_or(rest);
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let in_memory =
        path.is_empty() || path == ":memory:" || query.split('&').any(|pair| pair == "mode=memory");
    (!in_memory).then_some(path)
}

/// The folder of database file `database` (`.` for a bare file name).
fn folder_of(database: &Path) -> PathBuf {
    match database.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Checks that the folder of the SQLite file `url` names exists, without creating anything.
/// Other URLs (PostgreSQL, in-memory SQLite) pass.
///
/// # Errors
/// [`SqliteFileError::FolderMissing`] naming the folder.
pub fn check_folder(url: &str) -> Result<(), SqliteFileError> {
    let Some(file) = sqlite_file(url) else {
        return Ok(());
    };
    let database = PathBuf::from(file);
    let folder = folder_of(&database);
    if folder.is_dir() {
        Ok(())
    } else {
        Err(SqliteFileError::FolderMissing { folder, database })
    }
}

/// Takes the exclusive lock of the SQLite file `url` names, for a process that serves or
/// migrates it: `<file>-tenantry.lock` is created next to it when missing (never removed) and
/// locked without waiting. `None` for a URL that names no SQLite file (PostgreSQL, in-memory).
/// Creating the lock file is also the check that the folder exists and is writable.
///
/// # Errors
/// [`SqliteFileError::FolderMissing`], [`SqliteFileError::FolderNotWritable`] naming the
/// folder; [`SqliteFileError::InUse`] when another process holds the lock;
/// [`SqliteFileError::Lock`] for another I/O error.
pub fn lock(url: &str) -> Result<Option<SqliteLock>, SqliteFileError> {
    let Some(file) = sqlite_file(url) else {
        return Ok(None);
    };
    check_folder(url)?;
    let database = PathBuf::from(file);
    let mut name = database.as_os_str().to_owned();
    name.push(LOCK_SUFFIX);
    let path = PathBuf::from(name);
    let opened = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path);
    let lock_file = match opened {
        Ok(lock_file) => lock_file,
        Err(source) => return Err(open_failed(database, path, source)),
    };
    match lock_file.try_lock() {
        Ok(()) => Ok(Some(SqliteLock {
            _file: lock_file,
            path,
        })),
        Err(TryLockError::WouldBlock) => Err(SqliteFileError::InUse {
            database,
            lock: path,
        }),
        Err(TryLockError::Error(source)) => Err(SqliteFileError::Lock {
            database,
            lock: path,
            source,
        }),
    }
}

/// The error of a lock file that could not be opened: the folder is named when it refuses new
/// files (permissions, a read-only file system).
fn open_failed(database: PathBuf, lock: PathBuf, source: io::Error) -> SqliteFileError {
    match source.kind() {
        io::ErrorKind::PermissionDenied | io::ErrorKind::ReadOnlyFilesystem => {
            SqliteFileError::FolderNotWritable {
                folder: folder_of(&database),
                database,
                source,
            }
        }
        _ => SqliteFileError::Lock {
            database,
            lock,
            source,
        },
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn url(path: &Path) -> String {
        format!("sqlite://{}?mode=rwc", path.display())
    }

    #[test]
    fn sqlite_urls_name_their_file() {
        for (url, file) in [
            ("sqlite:///var/lib/t.db?mode=rwc", Some("/var/lib/t.db")),
            ("sqlite://t.db", Some("t.db")),
            ("sqlite:t.db?mode=rw", Some("t.db")),
            ("sqlite::memory:", None),
            ("sqlite://shared?mode=memory&cache=shared", None),
            ("postgres://u@h/db", None),
        ] {
            assert_eq!(sqlite_file(url), file, "{url}");
        }
        assert_eq!(folder_of(Path::new("t.db")), PathBuf::from("."));
        assert_eq!(
            folder_of(Path::new("/var/lib/t.db")),
            PathBuf::from("/var/lib")
        );
    }

    /// A second lock on the same database is refused naming the database and the lock file;
    /// dropping the first (as the end of its process does) lets the next one in.
    #[test]
    fn a_second_lock_is_refused_until_the_first_is_released() {
        let dir = tempfile::tempdir().unwrap();
        let database = dir.path().join("t.db");
        let first = lock(&url(&database)).unwrap().unwrap();
        assert_eq!(first.path(), dir.path().join("t.db-tenantry.lock"));
        let error = lock(&url(&database)).unwrap_err();
        let message = error.to_string();
        assert!(matches!(error, SqliteFileError::InUse { .. }), "{message}");
        assert!(
            message.contains(&database.display().to_string()),
            "{message}"
        );
        assert!(message.contains("t.db-tenantry.lock"), "{message}");
        assert!(message.contains("stop the other one"), "{message}");
        // Another database in the same folder is not affected.
        let other = lock(&url(&dir.path().join("other.db"))).unwrap();
        assert!(other.is_some());
        drop(first);
        assert!(lock(&url(&database)).unwrap().is_some());
    }

    #[test]
    fn urls_without_a_file_take_no_lock() {
        assert!(lock("sqlite::memory:").unwrap().is_none());
        assert!(lock("postgres://u@h/db").unwrap().is_none());
        assert!(check_folder("postgres://u@h/db").is_ok());
    }

    /// A database in a folder that does not exist is refused naming the folder, and nothing
    /// is created.
    #[test]
    fn a_missing_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("missing");
        let database = folder.join("t.db");
        for error in [
            check_folder(&url(&database)).unwrap_err(),
            lock(&url(&database)).unwrap_err(),
        ] {
            let message = error.to_string();
            assert!(
                matches!(error, SqliteFileError::FolderMissing { .. }),
                "{message}"
            );
            assert!(
                message.contains(&format!("the folder {} ", folder.display())),
                "{message}"
            );
            assert!(message.contains("does not exist"), "{message}");
        }
        assert!(!folder.exists());
    }

    /// A folder that refuses new files is named (decided from the error kind, so this holds
    /// for a read-only mount as for permissions, and for a test run as root).
    #[test]
    fn a_folder_that_refuses_files_is_named() {
        for kind in [
            io::ErrorKind::PermissionDenied,
            io::ErrorKind::ReadOnlyFilesystem,
        ] {
            let error = open_failed(
                PathBuf::from("/srv/data/t.db"),
                PathBuf::from("/srv/data/t.db-tenantry.lock"),
                io::Error::from(kind),
            );
            let message = error.to_string();
            assert!(
                matches!(error, SqliteFileError::FolderNotWritable { .. }),
                "{message}"
            );
            assert!(message.contains("folder /srv/data "), "{message}");
            assert!(message.contains("writable"), "{message}");
        }
        let error = open_failed(
            PathBuf::from("t.db"),
            PathBuf::from("t.db-tenantry.lock"),
            io::Error::from(io::ErrorKind::Other),
        );
        assert!(matches!(error, SqliteFileError::Lock { .. }), "{error}");
    }
}
